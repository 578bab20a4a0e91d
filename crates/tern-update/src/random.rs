//! The randomness the updater draws from the OS: a version-4 UUID (the updater id) and
//! a number in a range (jitter).

use crate::artifact;
use crate::error::{Error, Result};

/// A random version-4 UUID, in its 36-character form.
pub(crate) fn new_uuid() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(Error::Random)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = artifact::hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// A random number in `0..=n`.
pub(crate) fn random_up_to(n: u64) -> u64 {
    let mut b = [0u8; 8];
    if n == 0 || getrandom::fill(&mut b).is_err() {
        return 0;
    }
    match n.checked_add(1) {
        Some(range) => u64::from_le_bytes(b) % range,
        None => u64::from_le_bytes(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_up_to_any_bound() {
        assert_eq!(random_up_to(0), 0);
        for _ in 0..100 {
            assert!(random_up_to(3) <= 3);
        }
        let _ = random_up_to(u64::MAX);
    }

    #[test]
    fn uuid_shape() {
        let id = new_uuid().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_uuid().unwrap());
    }
}
