//! Interned strings for the values most agents share (group, version, updater version):
//! each agent holds 4-byte symbols instead of heap strings.

use std::collections::HashMap;
use std::num::NonZeroU32;

/// An interned string; `Option<Sym>` is 4 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Sym(NonZeroU32);

#[derive(Debug, Default)]
pub(crate) struct Names {
    strings: Vec<Box<str>>,
    syms: HashMap<Box<str>, Sym>,
}

impl Names {
    pub(crate) fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.syms.get(s) {
            return sym;
        }
        let sym = Sym(Self::nonzero(self.strings.len() + 1));
        self.strings.push(s.into());
        self.syms.insert(s.into(), sym);
        sym
    }

    /// [`Names::intern`], checking `old` first: a value that did not change costs a
    /// comparison, not a hash lookup.
    pub(crate) fn intern_as(&mut self, old: Option<Sym>, s: &str) -> Sym {
        match old {
            Some(o) if self.get(o) == s => o,
            _ => self.intern(s),
        }
    }

    fn nonzero(n: usize) -> NonZeroU32 {
        // More than 4 billion distinct names would not fit in memory first; saturating
        // keeps the type total.
        NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
    }

    pub(crate) fn get(&self, sym: Sym) -> &str {
        self.strings.get(sym.0.get() as usize - 1).map_or("", |s| s)
    }

    pub(crate) fn len(&self) -> usize {
        self.strings.len()
    }
}
