//! Agent ids kept in 16 bytes when they have the usual shapes: updater ids are
//! lower-case hyphenated UUIDs, host ids are machine-ids (32 lower-case hex digits).
//! Anything else is kept as text. The written form is given back exactly.

use std::fmt;

use tern_core::backpressure::UpdaterNumeral;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Id {
    Empty,
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower-case.
    Uuid([u8; 16]),
    /// 32 lower-case hex digits.
    Hex([u8; 16]),
    Text(Box<str>),
}

impl Id {
    pub(crate) fn parse(s: &str) -> Id {
        if s.is_empty() {
            return Id::Empty;
        }
        let b = s.as_bytes();
        if b.len() == 36
            && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
            && let Some(bytes) = hex16(b.iter().copied().filter(|&c| c != b'-'))
        {
            return Id::Uuid(bytes);
        }
        if b.len() == 32
            && let Some(bytes) = hex16(b.iter().copied())
        {
            return Id::Hex(bytes);
        }
        Id::Text(s.into())
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Id::Empty)
    }

    /// The id's backpressure position, as [`UpdaterNumeral::of`] its text.
    pub(crate) fn numeral(&self) -> UpdaterNumeral {
        match self {
            Id::Uuid(b) | Id::Hex(b) => UpdaterNumeral::from_bits(u128::from_be_bytes(*b)),
            Id::Empty => UpdaterNumeral::of(""),
            Id::Text(s) => UpdaterNumeral::of(s),
        }
    }
}

/// Sixteen bytes from exactly 32 lower-case hex digits.
fn hex16(digits: impl Iterator<Item = u8>) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut n = 0;
    for c in digits {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        let byte = out.get_mut(n / 2)?;
        *byte = (*byte << 4) | v;
        n += 1;
    }
    (n == 32).then_some(out)
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Empty => Ok(()),
            Id::Text(s) => f.write_str(s),
            Id::Hex(b) => b.iter().try_for_each(|x| write!(f, "{x:02x}")),
            Id::Uuid(b) => {
                for (i, x) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{x:02x}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn shapes() {
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert!(matches!(Id::parse(uuid), Id::Uuid(_)));
        let machine_id = "4c4c4544003957108052b4c04f384833";
        assert!(matches!(Id::parse(machine_id), Id::Hex(_)));
        // Upper case, other hyphenation or other lengths stay text, to be given back as sent.
        for text in [
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "0f8fad5bd9cb-469f-a165-70867728950e-",
            "host-1",
            "4c4c4544003957108052b4c04f38483",
            "4c4c4544003957108052b4c04f38483g",
        ] {
            assert!(matches!(Id::parse(text), Id::Text(_)), "{text}");
        }
        assert_eq!(Id::parse(""), Id::Empty);
        assert_eq!(std::mem::size_of::<Id>(), 24);
    }

    proptest! {
        #[test]
        fn round_trips_and_keeps_the_numeral(
            s in prop_oneof![
                "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                "[0-9a-f]{32}",
                "[0-9a-fA-F-]{0,40}",
                ".{0,40}",
            ]
        ) {
            let id = Id::parse(&s);
            prop_assert_eq!(id.to_string(), s.clone());
            prop_assert_eq!(id.numeral(), UpdaterNumeral::of(&s));
        }
    }
}
