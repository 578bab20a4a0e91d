//! Simulated agents: deterministic ids, hostnames and heartbeats from an index.

use tern_core::wire::Heartbeat;

/// The groups of `examples/01-halt-on-error`, and the share of agents in each (1:2:7).
pub fn group_of(i: u64) -> &'static str {
    match i % 10 {
        0 => "dev",
        1 | 2 => "staging",
        _ => "prod",
    }
}

fn mix(mut z: u64) -> u64 {
    // splitmix64
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random-looking version-4 UUID, the shape tern-update's updater ids have.
pub fn updater_id(i: u64) -> String {
    let a = mix(i);
    let b = mix(i ^ 0x5555_5555_5555_5555);
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// A machine-id-like host id (32 hex digits).
pub fn host_id(i: u64) -> String {
    format!("{:016x}{:016x}", mix(i ^ 0xaaaa), mix(i ^ 0xbbbb))
}

pub fn heartbeat(i: u64, version: &str) -> Heartbeat {
    Heartbeat {
        updater_id: updater_id(i),
        host_id: host_id(i),
        hostname: format!("host-{i:07}.fleet.example.com"),
        group: group_of(i).to_string(),
        version: version.to_string(),
        updater_version: Some("0.1.0".to_string()),
        ..Heartbeat::default()
    }
}
