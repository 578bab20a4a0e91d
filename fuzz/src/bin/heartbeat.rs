//! AFL harness: `cargo xtask fuzz heartbeat`.
fn main() {
    afl::fuzz!(|data: &[u8]| tern_fuzz::heartbeat(data));
}
