//! What `cargo xtask ci` says about its own time: each phase's, the total against the
//! budget, the machine's load while it ran, and the slowest tests (from the JUnit report
//! nextest writes, `.config/nextest.toml`'s `ci` profile).

use std::path::Path;
use std::time::{Duration, Instant};

/// A fresh clone's CI on the 2-core machine should take at most this long; well under
/// the 90 minutes after which a submission is refused.
pub(crate) const BUDGET: Duration = Duration::from_secs(30 * 60);

/// The phases run so far, with how long each took and whether it passed.
pub(crate) struct Phases {
    started: Instant,
    load_at_start: Option<String>,
    cpu_at_start: Option<Duration>,
    done: Vec<Done>,
}

/// One phase run: its wall time and the CPU time of the programs it ran.
struct Done {
    name: String,
    took: Duration,
    cpu: Option<Duration>,
    ok: bool,
}

impl Phases {
    pub(crate) fn start() -> Self {
        Self {
            started: Instant::now(),
            load_at_start: load_average(),
            cpu_at_start: children_cpu(),
            done: Vec::new(),
        }
    }

    /// Runs `f` as the phase `name`, timing it.
    pub(crate) fn run<T>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        eprintln!("==> phase: {name}");
        let at = Instant::now();
        let cpu = children_cpu();
        let result = f();
        self.done.push(Done {
            name: name.to_string(),
            took: at.elapsed(),
            cpu: children_cpu()
                .zip(cpu)
                .map(|(after, before)| after.saturating_sub(before)),
            ok: result.is_ok(),
        });
        result
    }

    /// The table of phases (wall time, and the CPU time of the programs each ran: what
    /// the machine's other users do not change), the total against [`BUDGET`] and the
    /// load average at start and end (the machine is shared: a loaded one makes every
    /// phase slower).
    pub(crate) fn summary(&self) -> String {
        let total = self.started.elapsed();
        let width = self.done.iter().map(|d| d.name.len()).max().unwrap_or(0);
        let cpu = |c: Option<Duration>| c.map_or("unknown".to_string(), minutes);
        let mut out = String::from("==> CI time by phase (wall; CPU of the programs it ran)\n");
        for d in &self.done {
            out.push_str(&format!(
                "    {:<width$}  {}  cpu {}{}\n",
                d.name,
                minutes(d.took),
                cpu(d.cpu),
                if d.ok { "" } else { "  (failed)" }
            ));
        }
        let verdict = if total <= BUDGET {
            format!("within the {} budget", minutes(BUDGET))
        } else {
            format!(
                "OVER the {} budget by {}",
                minutes(BUDGET),
                minutes(total - BUDGET)
            )
        };
        let total_cpu = children_cpu()
            .zip(self.cpu_at_start)
            .map(|(now, start)| now.saturating_sub(start));
        out.push_str(&format!(
            "    {:<width$}  {}  cpu {}  ({verdict})\n",
            "total",
            minutes(total),
            cpu(total_cpu)
        ));
        out.push_str(&format!(
            "    load average (1, 5, 15 min) at the start: {}; at the end: {}\n",
            self.load_at_start.as_deref().unwrap_or("unknown"),
            load_average().as_deref().unwrap_or("unknown")
        ));
        out
    }
}

/// `12m 05s`.
fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m {:02}s", s / 60, s % 60)
}

/// The user and system CPU time of this process's children that have ended (and of
/// theirs, waited for): fields 16 and 17 of `/proc/self/stat`, in clock ticks of 1/100 s
/// (Linux's USER_HZ).
fn children_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name, in parentheses, may hold spaces: count fields after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is the first after the name: field n is at index n - 3.
    let ticks = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Duration::from_millis((ticks(16)? + ticks(17)?) * 10))
}

/// The first three fields of `/proc/loadavg`.
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// One test case of a JUnit report: `crate::binary test_name` and its seconds.
#[derive(Debug, PartialEq)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) secs: f64,
}

/// The test cases of a JUnit report (nextest's: a `testcase` element per test, with
/// `name`, `classname` and `time` in seconds), slowest first.
pub(crate) fn cases(xml: &str) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    for element in xml.split("<testcase ").skip(1) {
        let head = element.split('>').next().unwrap_or_default();
        // Every attribute after a space, the first one too.
        let spaced = format!(" {head}");
        let attr = |key: &str| attribute(&spaced, key);
        let (Some(name), Some(time)) = (attr("name"), attr("time")) else {
            return Err(format!(
                "a testcase without a name or a time: <testcase {head}>"
            ));
        };
        let secs: f64 = time
            .parse()
            .map_err(|_| format!("testcase {name}: time {time:?} is not a number"))?;
        let name = match attr("classname") {
            Some(class) => format!("{class} {name}"),
            None => name,
        };
        out.push(Case { name, secs });
    }
    out.sort_by(|a, b| b.secs.total_cmp(&a.secs).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// The value of ` key="…"` in an element's head, unescaped.
fn attribute(head: &str, key: &str) -> Option<String> {
    let start = head
        .find(&format!(" {key}=\""))
        .map(|i| i + key.len() + 3)?;
    let len = head[start..].find('"')?;
    Some(
        head[start..start + len]
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

/// The `n` slowest tests of the JUnit report at `path`, as lines to print.
pub(crate) fn slowest(path: &Path, n: usize) -> String {
    let xml = match std::fs::read_to_string(path) {
        Ok(x) => x,
        Err(e) => return format!("==> slowest tests: no report at {} ({e})\n", path.display()),
    };
    match cases(&xml) {
        Ok(all) => {
            let sum: f64 = all.iter().map(|c| c.secs).sum();
            let mut out = format!(
                "==> the {} slowest of {} tests (their times add up to {})\n",
                n.min(all.len()),
                all.len(),
                minutes(Duration::from_secs_f64(sum))
            );
            for c in all.iter().take(n) {
                out.push_str(&format!("    {:>7.1}s  {}\n", c.secs, c.name));
            }
            out
        }
        Err(e) => format!(
            "==> slowest tests: {} is not readable: {e}\n",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" failures="0" errors="0" uuid="x" timestamp="2026-01-01T00:00:00Z" time="12.5">
    <testsuite name="tern-core::find_table" tests="2" disabled="0" errors="0" failures="0">
        <testcase name="every_cell" classname="tern-core::find_table" timestamp="2026-01-01T00:00:00Z" time="0.250">
        </testcase>
        <testcase name="a &quot;quoted&quot; &amp; odd" classname="tern-core::find_table" timestamp="2026-01-01T00:00:00Z" time="3.5"/>
    </testsuite>
    <testsuite name="tern-sim::sim" tests="1" disabled="0" errors="0" failures="1">
        <testcase name="faults" classname="tern-sim::sim" timestamp="2026-01-01T00:00:00Z" time="119.263">
            <failure type="test failure">it failed</failure>
        </testcase>
    </testsuite>
</testsuites>
"#;

    #[test]
    fn the_cases_of_a_report_come_slowest_first() {
        let c = cases(REPORT).unwrap();
        assert_eq!(
            c,
            [
                Case {
                    name: "tern-sim::sim faults".into(),
                    secs: 119.263
                },
                Case {
                    name: "tern-core::find_table a \"quoted\" & odd".into(),
                    secs: 3.5
                },
                Case {
                    name: "tern-core::find_table every_cell".into(),
                    secs: 0.25
                },
            ]
        );
    }

    #[test]
    fn a_case_without_a_time_is_an_error_naming_it() {
        let err = cases(r#"<testcase name="x" classname="c">"#).unwrap_err();
        assert!(err.contains("<testcase name=\"x\""), "{err}");
        let err = cases(r#"<testcase name="x" time="soon">"#).unwrap_err();
        assert_eq!(err, "testcase x: time \"soon\" is not a number");
    }

    #[test]
    fn the_slowest_are_listed_with_their_times() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junit.xml");
        std::fs::write(&path, REPORT).unwrap();
        assert_eq!(
            slowest(&path, 2),
            "==> the 2 slowest of 3 tests (their times add up to 2m 03s)\n      119.3s  tern-sim::sim faults\n        3.5s  tern-core::find_table a \"quoted\" & odd\n"
        );
        assert!(
            slowest(&dir.path().join("none.xml"), 20)
                .starts_with("==> slowest tests: no report at")
        );
    }

    #[test]
    fn phases_are_timed_and_a_failed_one_said() {
        let mut p = Phases::start();
        assert_eq!(p.run("fmt", || Ok::<_, String>(7)), Ok(7));
        assert!(p.run("tests", || Err::<(), _>("boom".to_string())).is_err());
        let s = p.summary();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "==> CI time by phase (wall; CPU of the programs it ran)"
        );
        assert_eq!(lines[1], "    fmt    0m 00s  cpu 0m 00s");
        assert_eq!(lines[2], "    tests  0m 00s  cpu 0m 00s  (failed)");
        assert_eq!(
            lines[3],
            "    total  0m 00s  cpu 0m 00s  (within the 30m 00s budget)"
        );
        assert!(lines[4].starts_with("    load average (1, 5, 15 min) at the start: "));
    }

    #[test]
    fn the_cpu_of_ended_children_is_counted() {
        let before = children_cpu().unwrap();
        // A child that spins for a while, then ends and is waited for.
        let st = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(st.success());
        assert!(children_cpu().unwrap() > before);
    }
}
