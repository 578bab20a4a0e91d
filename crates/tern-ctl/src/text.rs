//! Small helpers for English output.

/// `n` and `noun`, the noun in the plural unless `n` is 1: `1 agent`, `5 agents`,
/// `0 agents`. For nouns whose plural takes an `s` (all ternctl needs).
pub fn plural(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_is_singular_everything_else_plural() {
        assert_eq!(plural(1u32, "agent"), "1 agent");
        assert_eq!(plural(0u32, "agent"), "0 agents");
        assert_eq!(plural(12u64, "replica"), "12 replicas");
    }
}
