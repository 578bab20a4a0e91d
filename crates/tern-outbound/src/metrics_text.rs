//! The Prometheus text exposition format (version 0.0.4), the one writer of it: ternd's
//! `/metrics` and the alert notifiers' counters write every family through here, so
//! that HELP and TYPE lines, label escaping and histogram series are spelled once.
//!
//! A family is its `# HELP` and `# TYPE` lines ([`family`]) followed by its samples
//! ([`sample`]); [`counter`], [`gauge`] and [`histogram`] write a whole family.
//! Label values are escaped as the format asks (`\`, `"` and a line feed), and so is
//! the help text (`\` and a line feed). Values are written with `Display`, so integers
//! stay integers and floats are Rust's shortest round-tripping form (`0.005`, `1`).

use std::fmt::{Display, Write as _};

/// The type of a metric family (its `# TYPE` line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The `# HELP` and `# TYPE` lines that start a family; its samples follow.
pub fn family(out: &mut String, name: &str, kind: Kind, help: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind.as_str());
    out.push('\n');
}

/// One sample: `name{label="value",…} value` (no braces without labels).
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(label);
            out.push_str("=\"");
            push_escaped(out, v);
            out.push('"');
        }
        out.push('}');
    }
    // Writing to a String cannot fail.
    let _ = writeln!(out, " {value}");
}

/// A counter family of one unlabelled sample.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, Kind::Counter, help);
    sample(out, name, &[], value);
}

/// A gauge family of one unlabelled sample.
pub fn gauge(out: &mut String, name: &str, help: &str, value: impl Display) {
    family(out, name, Kind::Gauge, help);
    sample(out, name, &[], value);
}

/// A histogram family without labels: `buckets` are (upper bound, cumulative count)
/// in increasing order; the `+Inf` bucket is `count`.
pub fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    buckets: impl IntoIterator<Item = (f64, u64)>,
    sum: f64,
    count: u64,
) {
    family(out, name, Kind::Histogram, help);
    for (le, n) in buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}"
    );
}

fn push_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_as_the_text_format_asks() {
        let mut out = String::new();
        counter(&mut out, "a_total", "things done", 3);
        gauge(&mut out, "b", "a level", 0.5);
        family(&mut out, "c", Kind::Gauge, "per \\ kind\nand more");
        sample(&mut out, "c", &[("kind", "x\"y\\z\nw"), ("k2", "v")], 1);
        histogram(
            &mut out,
            "d_seconds",
            "durations",
            [(0.001, 0), (1.0, 2)],
            1.25,
            3,
        );
        assert_eq!(
            out,
            "# HELP a_total things done\n# TYPE a_total counter\na_total 3\n\
             # HELP b a level\n# TYPE b gauge\nb 0.5\n\
             # HELP c per \\\\ kind\\nand more\n# TYPE c gauge\n\
             c{kind=\"x\\\"y\\\\z\\nw\",k2=\"v\"} 1\n\
             # HELP d_seconds durations\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.001\"} 0\nd_seconds_bucket{le=\"1\"} 2\n\
             d_seconds_bucket{le=\"+Inf\"} 3\nd_seconds_sum 1.25\nd_seconds_count 3\n"
        );
    }

    #[test]
    fn plain_label_values_are_written_as_they_are() {
        let mut out = String::new();
        sample(&mut out, "e", &[("v", "prod-eu 1.2.3 (other)")], 7);
        assert_eq!(out, "e{v=\"prod-eu 1.2.3 (other)\"} 7\n");
    }
}
