//! AFL harness: `cargo xtask fuzz tar`.
fn main() {
    afl::fuzz!(|data: &[u8]| tern_fuzz::tar(data));
}
