//! The fuzzing targets: each takes arbitrary bytes and must neither panic nor hang, and
//! checks what must hold of what it accepts. `src/bin/*` run them under AFL
//! (`cargo xtask fuzz TARGET`); `tests/corpus.rs` replays the committed corpus and every
//! crash found so far through them on each test run.

use std::time::Instant;

use tern_core::codec::{self, Format};
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_core::wire::Heartbeat;
use tern_server::Inventory;

/// A fuzzing target: arbitrary bytes in, a panic on what must not happen.
pub type Target = fn(&[u8]);

/// The targets by name, as `cargo xtask fuzz` and the corpus test know them.
pub const TARGETS: &[(&str, Target)] = &[
    ("resources", resources),
    ("find-query", find_query),
    ("heartbeat", heartbeat),
    ("tar", tar),
];

/// Resource texts (YAML or JSON): what parses writes back and parses to the same.
pub fn resources(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = AutoUpdateConfig::from_text(text) {
        for format in [Format::Yaml, Format::Json] {
            let again = codec::to_text(&config, format).expect("a parsed config encodes");
            let back = AutoUpdateConfig::from_text(&again)
                .unwrap_or_else(|e| panic!("a written config reads back: {e}\n{again}"));
            assert_eq!(back, config, "round trip through {format:?}");
        }
    }
    if let Ok(version) = AutoUpdateVersion::from_text(text) {
        let again = codec::to_text(&version, Format::Yaml).expect("a parsed version encodes");
        assert!(AutoUpdateVersion::from_text(&again).is_ok(), "{again}");
    }
    let _ = codec::list_from_text::<serde_json::Value>(text);
}

/// find's query string: decoded in place, whatever it holds.
pub fn find_query(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let (group, id) = tern_server::fuzzing::fuzz_find_query(raw);
    assert!(group.len() <= raw.len() && id.len() <= raw.len());
}

/// Heartbeat bodies, one per line, into one inventory: what is accepted is counted.
pub fn heartbeat(data: &[u8]) {
    let mut inventory = Inventory::with_max_agents(64);
    let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().expect("a valid instant");
    let at = Instant::now();
    for line in data.split(|&b| b == b'\n') {
        let Ok(hb) = serde_json::from_slice::<Heartbeat>(line) else {
            continue;
        };
        let _ = inventory.heartbeat(&hb, now, at);
        assert!(inventory.len() <= 64);
    }
}

/// Tar entry checks over an uncompressed archive, with 1 MiB free.
pub fn tar(data: &[u8]) {
    tern_unpack::fuzzing::fuzz_plan(data, 1 << 20);
}
