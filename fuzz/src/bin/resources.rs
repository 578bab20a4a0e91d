//! AFL harness: `cargo xtask fuzz resources`.
fn main() {
    afl::fuzz!(|data: &[u8]| tern_fuzz::resources(data));
}
