//! The `--interval` of the commands that watch: a duration of at least a second.

use tern_core::duration::GoDuration;

pub(super) fn parse_interval(s: &str) -> Result<GoDuration, String> {
    let d = GoDuration::parse(s).map_err(|e| e.to_string())?;
    if d.as_secs() == 0 {
        return Err("the interval must be at least 1s".to_string());
    }
    Ok(d)
}
