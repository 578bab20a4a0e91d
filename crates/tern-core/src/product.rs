//! Products: what a host runs that ternd rolls out. Every host has the agent (the
//! product Teleport's resource files describe); tern-update's own releases are the
//! `updater` product; an operator may add others. A product's name becomes part of
//! store keys, URLs and metric labels, so it is held to a narrow shape.

/// The product every host has.
pub const AGENT: &str = "agent";

/// tern-update's own releases.
pub const UPDATER: &str = "updater";

/// Whether `name` may name a product: 1 to 63 of `a-z`, `0-9` and `-`, starting with a
/// letter.
pub fn is_product_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_names_are_narrow() {
        for ok in [AGENT, UPDATER, "sidecar-2", "a"] {
            assert!(is_product_name(ok), "{ok}");
        }
        for bad in ["", "Agent", "2nd", "a b", "a/b", "a_b", &"a".repeat(64)] {
            assert!(!is_product_name(bad), "{bad}");
        }
    }
}
