//! AFL harness: `cargo xtask fuzz find-query`.
fn main() {
    afl::fuzz!(|data: &[u8]| tern_fuzz::find_query(data));
}
