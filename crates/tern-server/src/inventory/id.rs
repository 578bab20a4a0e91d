//! Agent ids kept in 16 bytes when they have the usual shapes: updater ids are
//! lower-case hyphenated UUIDs, host ids are machine-ids (32 lower-case hex digits).
//! Anything else is kept as text. The written form is given back exactly.
//!
//! Three forms: [`Id`] owns its text (the history queue's key); [`IdRef`] borrows it
//! (a heartbeat's id, parsed without an allocation, and an agent's id as read); an
//! inventory entry keeps a [`StoredId`]: 17 bytes of alignment 1 (two of them pack
//! into 34 bytes, not 48), its rare text in the inventory's string store.

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

/// An id borrowing its text. Its variants, and so its order, are [`Id`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum IdRef<'a> {
    Empty,
    Uuid([u8; 16]),
    Hex([u8; 16]),
    Text(&'a str),
}

/// An id as an inventory entry keeps it: alignment 1, so that it packs between the
/// entry's other fields; a text id is a reference into the inventory's string store
/// (`hostnames::TextRef`), which the inventory resolves ([`StoredId::get`]). No
/// `PartialEq`: two stored text ids are equal by their text, not by where it is kept;
/// compare them resolved, as [`IdRef`]s.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StoredId<T> {
    Empty,
    Uuid([u8; 16]),
    Hex([u8; 16]),
    Text(T),
}

impl<T: Copy> StoredId<T> {
    /// `id`, its text (if any) kept by `keep`.
    pub(crate) fn of(id: IdRef<'_>, keep: impl FnOnce(&str) -> T) -> Self {
        match id {
            IdRef::Empty => StoredId::Empty,
            IdRef::Uuid(b) => StoredId::Uuid(b),
            IdRef::Hex(b) => StoredId::Hex(b),
            IdRef::Text(s) => StoredId::Text(keep(s)),
        }
    }

    /// The id, its text (if any) read by `text`.
    pub(crate) fn get<'a>(&self, text: impl FnOnce(T) -> &'a str) -> IdRef<'a> {
        match *self {
            StoredId::Empty => IdRef::Empty,
            StoredId::Uuid(b) => IdRef::Uuid(b),
            StoredId::Hex(b) => IdRef::Hex(b),
            StoredId::Text(t) => IdRef::Text(text(t)),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, StoredId::Empty)
    }

    /// Its text reference, if it is a text id.
    pub(crate) fn text(&self) -> Option<T> {
        match *self {
            StoredId::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl<'a> IdRef<'a> {
    pub(crate) fn parse(s: &'a str) -> IdRef<'a> {
        if s.is_empty() {
            return IdRef::Empty;
        }
        let b = s.as_bytes();
        if b.len() == 36
            && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
            && let Some(bytes) = hex16(b.iter().copied().filter(|&c| c != b'-'))
        {
            return IdRef::Uuid(bytes);
        }
        if b.len() == 32
            && let Some(bytes) = hex16(b.iter().copied())
        {
            return IdRef::Hex(bytes);
        }
        IdRef::Text(s)
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, IdRef::Empty)
    }

    /// The id's backpressure position, as [`UpdaterNumeral::of`] its text.
    pub(crate) fn numeral(&self) -> UpdaterNumeral {
        match self {
            IdRef::Uuid(b) | IdRef::Hex(b) => UpdaterNumeral::from_bits(u128::from_be_bytes(*b)),
            IdRef::Empty => UpdaterNumeral::of(""),
            IdRef::Text(s) => UpdaterNumeral::of(s),
        }
    }
}

impl Id {
    pub(crate) fn parse(s: &str) -> Id {
        match IdRef::parse(s) {
            IdRef::Empty => Id::Empty,
            IdRef::Uuid(b) => Id::Uuid(b),
            IdRef::Hex(b) => Id::Hex(b),
            IdRef::Text(s) => Id::Text(s.into()),
        }
    }

    pub(crate) fn as_ref(&self) -> IdRef<'_> {
        match self {
            Id::Empty => IdRef::Empty,
            Id::Uuid(b) => IdRef::Uuid(*b),
            Id::Hex(b) => IdRef::Hex(*b),
            Id::Text(s) => IdRef::Text(s),
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
        self.as_ref().fmt(f)
    }
}

impl fmt::Display for IdRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdRef::Empty => Ok(()),
            IdRef::Text(s) => f.write_str(s),
            IdRef::Hex(b) => b.iter().try_for_each(|x| write!(f, "{x:02x}")),
            IdRef::Uuid(b) => {
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
        // What an entry holds: 17 bytes, alignment 1.
        assert_eq!(std::mem::size_of::<StoredId<[u8; 16]>>(), 17);
        assert_eq!(std::mem::align_of::<StoredId<[u8; 16]>>(), 1);
    }

    proptest! {
        #[test]
        fn round_trips_and_keeps_the_numeral(
            s in prop_oneof![
                "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                "[0-9a-f]{32}",
                "[0-9a-fA-F-]{0,40}",
                ".{0,40}",
            ],
            t in prop_oneof!["[0-9a-f]{32}", ".{0,40}"],
        ) {
            let id = Id::parse(&s);
            prop_assert_eq!(id.to_string(), s.clone());
            prop_assert_eq!(id.as_ref().numeral(), UpdaterNumeral::of(&s));
            // The borrowed and stored forms: the same id, the same order.
            let r = IdRef::parse(&s);
            prop_assert_eq!(r, id.as_ref());
            prop_assert_eq!(r.to_string(), s.clone());
            let stored = StoredId::of(r, |t| t.len());
            prop_assert_eq!(stored.get(|_| s.as_str()), r);
            let other = Id::parse(&t);
            prop_assert_eq!(id.cmp(&other), r.cmp(&other.as_ref()));
        }
    }
}
