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
}
