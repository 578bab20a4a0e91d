//! Identifier formatting shared by every crate that makes ids (the simulator, the
//! replay's deterministic fleet, tests): one spelling of a UUID.

/// The canonical lower-case, hyphenated text of a 128-bit id (`8-4-4-4-12` hex digits).
pub(crate) fn uuid_text(bytes: [u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// A random version-4 UUID from 16 bytes of the caller's randomness (sans-IO: the
/// caller owns the generator).
pub fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid_text(bytes)
}

/// SplitMix64's finalizer: spreads consecutive seeds over the whole 64-bit space, so
/// deterministic ids made from counters sort like random ones (backpressure admits
/// hosts by id order).
pub fn spread(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A UUID-shaped id from two 64-bit halves.
pub fn uuid_from_halves(hi: u64, lo: u64) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hi.to_be_bytes());
    b[8..].copy_from_slice(&lo.to_be_bytes());
    uuid_text(b)
}

/// Whether `s` is a UUID in its hyphenated text (`8-4-4-4-12` hex digits, either
/// case): what Teleport writes as a resource's `metadata.revision`, where ternd writes
/// its store revision, a number.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyphenated_lower_case() {
        let b: [u8; 16] = core::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(uuid_text(b), "00112233-4455-6677-8899-aabbccddeeff");
        let v4 = uuid_v4([0xff; 16]);
        assert_eq!(v4, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(
            uuid_from_halves(0x0123_4567_89ab_cdef, 1),
            "01234567-89ab-cdef-0000-000000000001"
        );
        assert_ne!(spread(1), spread(2));
        assert_ne!(
            spread(1) >> 32,
            spread(2) >> 32,
            "neighbours differ in the high half"
        );
    }

    #[test]
    fn uuids_are_told_from_revisions() {
        assert!(is_uuid("3f2504e0-4f89-41d3-9a0c-0305e82c3301"));
        assert!(is_uuid("3F2504E0-4F89-41D3-9A0C-0305E82C3301"));
        assert!(is_uuid(&uuid_from_halves(1, 2)));
        for no in [
            "",
            "25",
            "3f2504e04f8941d39a0c0305e82c3301",
            "3f2504e0-4f89-41d3-9a0c-0305e82c330g",
        ] {
            assert!(!is_uuid(no), "{no}");
        }
    }
}
