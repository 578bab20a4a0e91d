//! Every agent's hostname, end to end in one string: each agent holds an 8-byte
//! reference ([`HostnameRef`]) instead of a 16-byte pointer to a heap block of its own
//! (48 bytes for a 30-byte name with the allocator's overhead). A name replaced or
//! forgotten leaves its bytes behind as garbage; once garbage is most of the string,
//! the inventory writes the live names into a fresh one ([`Hostnames::compacted`]).
//!
//! The rare ids that are not UUIDs or machine-ids are kept here too, whole
//! ([`TextRef`]): an entry's id stays 17 bytes of alignment 1 (`id::StoredId`).

/// Where a hostname is in [`Hostnames`]: its offset (48 bits) and length (16 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct HostnameRef(u64);

/// Longest hostname kept whole. ternd refuses heartbeats with a hostname over 256 bytes
/// before they reach the inventory (`routes::public`); a longer one given to the
/// inventory directly is kept to its first `MAX_LEN` bytes.
pub(super) const MAX_LEN: usize = u16::MAX as usize;

impl HostnameRef {
    fn at(self) -> usize {
        usize::try_from(self.0 >> 16).unwrap_or(usize::MAX)
    }

    pub(super) fn len(self) -> usize {
        usize::from(self.0 as u16)
    }
}

/// Where a text id is in [`Hostnames`]: its offset and length, 8 bytes each, as bytes
/// (alignment 1). Not cut: an id is given back exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TextRef([u8; 16]);

impl TextRef {
    fn at(self) -> usize {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        usize::try_from(u64::from_le_bytes([a, b, c, d, e, f, g, h])).unwrap_or(usize::MAX)
    }

    fn len(self) -> usize {
        let [.., a, b, c, d, e, f, g, h] = self.0;
        usize::try_from(u64::from_le_bytes([a, b, c, d, e, f, g, h])).unwrap_or(usize::MAX)
    }
}

#[derive(Debug, Default)]
pub(super) struct Hostnames {
    text: String,
    /// Bytes of `text` no agent refers to any more.
    garbage: usize,
}

impl Hostnames {
    pub(super) fn get(&self, r: HostnameRef) -> &str {
        self.slice(r.at(), r.len())
    }

    /// Appends `name` (cut at a character boundary to at most [`MAX_LEN`] bytes).
    pub(super) fn push(&mut self, name: &str) -> HostnameRef {
        let mut len = name.len().min(MAX_LEN);
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let at = self.text.len() as u64;
        self.text.push_str(&name[..len]);
        // 48 bits of offset: 256 TiB of names, more than any memory holds.
        HostnameRef((at << 16) | len as u64)
    }

    pub(super) fn text(&self, r: TextRef) -> &str {
        self.slice(r.at(), r.len())
    }

    /// The bytes `at..at + len`, where a reference the inventory holds points: always
    /// within the string (a test build checks; an empty name or id there would be a
    /// wrong key).
    fn slice(&self, at: usize, len: usize) -> &str {
        let text = self.text.get(at..at.saturating_add(len));
        debug_assert!(
            text.is_some(),
            "a reference is out of the inventory's string"
        );
        text.unwrap_or("")
    }

    /// Appends `text` whole.
    pub(super) fn push_text(&mut self, text: &str) -> TextRef {
        let at = self.text.len() as u64;
        self.text.push_str(text);
        let mut r = [0u8; 16];
        r[..8].copy_from_slice(&at.to_le_bytes());
        r[8..].copy_from_slice(&(text.len() as u64).to_le_bytes());
        TextRef(r)
    }

    /// `r` is no longer referred to.
    pub(super) fn release_text(&mut self, r: TextRef) {
        self.garbage += r.len();
    }

    /// Bytes no agent refers to any more.
    #[cfg(test)]
    pub(super) fn garbage(&self) -> usize {
        self.garbage
    }

    /// `r` is no longer referred to.
    pub(super) fn release(&mut self, r: HostnameRef) {
        self.garbage += r.len();
    }

    /// Whether compacting is worth a pass over the agents: garbage is most of the
    /// string, and more than a little.
    pub(super) fn wants_compaction(&self) -> bool {
        self.garbage > 64 * 1024 && self.garbage * 2 > self.text.len()
    }

    /// A fresh store with room for `live` bytes; the caller pushes the live names
    /// into it.
    pub(super) fn compacted(&self) -> Hostnames {
        Hostnames {
            text: String::with_capacity(self.text.len().saturating_sub(self.garbage)),
            garbage: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_back_exactly_and_garbage_is_counted() {
        let mut h = Hostnames::default();
        let a = h.push("host-1.example.com");
        let b = h.push("");
        let c = h.push("ünïcode-hôst");
        assert_eq!(h.get(a), "host-1.example.com");
        assert_eq!(h.get(b), "");
        assert_eq!(h.get(c), "ünïcode-hôst");
        h.release(a);
        assert_eq!(h.garbage, 18);
        assert!(!h.wants_compaction(), "a little garbage is left alone");
        let long = "é".repeat(MAX_LEN);
        let l = h.push(&long);
        assert!(l.len() <= MAX_LEN && h.get(l).chars().all(|c| c == 'é'));
        // Text ids are kept whole, however long.
        let id = "ï".repeat(MAX_LEN);
        let t = h.push_text(&id);
        assert_eq!(h.text(t), id);
        assert_eq!(h.get(a), "host-1.example.com");
        let before = h.garbage;
        h.release_text(t);
        assert_eq!(h.garbage, before + id.len());
    }
}
