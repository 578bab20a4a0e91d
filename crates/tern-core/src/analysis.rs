//! Canary analysis: a group may declare Prometheus queries its canaries must pass,
//! besides running the target healthy, before it goes active (`analysis` in a group of
//! `autoupdate_config`). Pure: the core says which queries are due
//! (`reconcile::analysis_requests`, with the placeholders filled in), ternd fetches their values and feeds them back to the
//! reconcile ([`Measured`]), which judges them ([`judge`]) and counts the passes
//! ([`record`]).
//!
//! Fail closed: a value that is missing, not a number, or a query that could not be
//! run holds the group (`analysis_held`); a value past its limit fails the analysis
//! (`analysis_failed`), which is a failed canary: the group holds in canary, an alert
//! names the query and its values, and an operator rolls back (or resets the group
//! to try again with new canaries).

use jiff::{SignedDuration, Timestamp};

use serde::{Deserialize, Serialize};

use crate::domain::duration::GoDuration;

/// A group's canary analysis: every query passes `passes` times in a row, one
/// evaluation per `interval`, once every canary runs the target healthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalysisSpec {
    pub queries: Vec<AnalysisQuery>,
    /// Between two evaluations; unset: 1m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
    /// Consecutive passing evaluations needed; unset: 1. Signed so that a negative
    /// value reaches validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes: Option<i64>,
}

/// One query of an analysis: a PromQL expression (with `{{placeholders}}`) that must
/// come back as one number, judged by a threshold (`max`, `min`) or against the same
/// measure of the hosts still on the start version (`baseline`, `max_ratio`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalysisQuery {
    /// Names the query in reasons and alerts.
    pub name: String,
    pub query: String,
    /// The canaries' value must be at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The canaries' value must be at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The same measure for the hosts still on the start version: the canaries' value
    /// must be at most `baseline × max_ratio + tolerance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ratio: Option<f64>,
    /// Absolute slack on top of the ratio (a baseline of 0 would refuse any error);
    /// unset: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

/// Where a group's canary analysis stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalysisStatus {
    /// Consecutive passing evaluations.
    #[serde(default)]
    pub passes: u32,
    /// When the last evaluation was fed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluated_at: Option<Timestamp>,
    /// The last evaluation could not judge (Prometheus unreachable, a query error, no
    /// data): the group holds until one can.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// A query failed: latched until the group is reset, rolled back or restarted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// The last evaluation in words: each query with its values, or why it held.
    #[serde(default)]
    pub message: String,
}

/// Between two evaluations when `interval` is unset.
pub(crate) const DEFAULT_INTERVAL: SignedDuration = SignedDuration::from_mins(1);
/// The shortest `interval` (Prometheus scrapes every 15s by default).
pub(crate) const MIN_INTERVAL_SECS: u64 = 1;
/// Queries one analysis may hold at most.
pub(crate) const MAX_QUERIES: usize = 8;
/// The longest query text, placeholders unfilled.
pub(crate) const MAX_QUERY_BYTES: usize = 4096;
/// The most consecutive passes one may ask for.
pub(crate) const MAX_PASSES: i64 = 100;
/// Characters of an error kept in a reason (the rest of what a server said is cut).
pub(crate) const MAX_REASON_CHARS: usize = 300;

/// The placeholders a query may use. Each is filled in escaped for a PromQL
/// double-quoted string; the `canary_*` ones as a regular-expression alternation of
/// the canaries' values (for `=~`), each value escaped as a literal.
pub(crate) const PLACEHOLDERS: &[&str] = &[
    "group",
    "version",
    "start_version",
    "canary_hosts",
    "canary_host_ids",
    "canary_updater_ids",
];

/// The placeholders of `query` that are not known, or a `{{` never closed.
pub(crate) fn unknown_placeholders(query: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let mut rest = query;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            bad.push(format!("{{{{{}", crate::domain::text::excerpt(after, 20)));
            break;
        };
        let name = &after[..end];
        if !PLACEHOLDERS.contains(&name) {
            bad.push(format!("{{{{{name}}}}}"));
        }
        rest = &after[end + 2..];
    }
    bad
}

/// What a query's placeholders are filled with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    pub group: String,
    pub version: String,
    pub start_version: String,
    pub canary_hosts: Vec<String>,
    pub canary_host_ids: Vec<String>,
    pub canary_updater_ids: Vec<String>,
}

/// Escapes `s` for the inside of a PromQL double-quoted string.
pub(crate) fn promql_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Escapes `s` as a literal in an RE2 regular expression (Prometheus' `=~`).
pub(crate) fn regex_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `s` as a value put into a query: without the characters a PromQL string cannot
/// carry (control characters, which [`promql_string`] drops too). Cleaned first, so
/// that what is decided on a value (is it empty?) is decided on what the query will
/// hold: a value of control characters only is empty.
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// `values` as an alternation for `=~"…"`: each cleaned, the empty ones left out, each
/// a literal. `None` when none is left: an empty regex, or an empty branch, would
/// select series without the label.
fn alternation(values: &[String]) -> Option<String> {
    let mut kept: Vec<String> = values
        .iter()
        .map(|v| clean(v))
        .filter(|v| !v.is_empty())
        .map(|v| regex_literal(&v))
        .collect();
    kept.sort();
    kept.dedup();
    (!kept.is_empty()).then(|| promql_string(&kept.join("|")))
}

/// One value for a placeholder, cleaned and escaped; refused when nothing is left (a
/// label compared to "" selects the series without it).
fn one_value(name: &str, value: &str) -> Result<String, String> {
    let v = clean(value);
    if v.is_empty() {
        return Err(format!(
            "{{{{{name}}}}} is empty (or only control characters): it would select series without the label"
        ));
    }
    Ok(promql_string(&v))
}

/// `template` with its placeholders filled in from `vars`, or why it cannot be (a
/// `canary_*` placeholder with no canary value to select by, an unknown placeholder).
pub fn render(template: &str, vars: &Vars) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| "a {{ is never closed".to_string())?;
        let name = &after[..end];
        let filled = match name {
            "group" => one_value(name, &vars.group)?,
            "version" => one_value(name, &vars.version)?,
            "start_version" => one_value(name, &vars.start_version)?,
            "canary_hosts" | "canary_host_ids" | "canary_updater_ids" => {
                let values = match name {
                    "canary_hosts" => &vars.canary_hosts,
                    "canary_host_ids" => &vars.canary_host_ids,
                    _ => &vars.canary_updater_ids,
                };
                alternation(values)
                    .ok_or_else(|| format!("no canary has a value for {{{{{name}}}}}"))?
            }
            other => return Err(format!("{{{{{other}}}}} is not a placeholder")),
        };
        out.push_str(&filled);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One query to run, placeholders filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedQuery {
    pub name: String,
    /// The canaries' measure, or why it could not be rendered.
    pub query: Result<String, String>,
    /// The baseline's measure, for a comparison.
    pub baseline: Option<Result<String, String>>,
}

/// The queries of one group that are due now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub group: String,
    pub queries: Vec<RenderedQuery>,
}

/// Between two evaluations of `spec`.
pub fn interval(spec: &AnalysisSpec) -> SignedDuration {
    spec.interval.map_or(DEFAULT_INTERVAL, |d| d.as_signed())
}

/// Consecutive passes `spec` needs.
pub(crate) fn passes_needed(spec: &AnalysisSpec) -> u32 {
    spec.passes
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(1)
        .max(1)
}

/// A value fetched for a query, or why there is none (unreachable, an error, not one
/// number). Untrusted until judged.
pub type Sample = Result<f64, String>;

/// The values fetched for one query of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryValues {
    pub name: String,
    pub canary: Sample,
    /// For a query with a `baseline`.
    pub baseline: Option<Sample>,
}

/// What the leader fetched for one group's due analysis, at the reconcile's instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub group: String,
    pub values: Vec<QueryValues>,
}

/// What one evaluation says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every query is within its limits.
    Pass { message: String },
    /// A query is past its limit: `query` names the first, `message` says every one
    /// with its values.
    Fail { query: String, message: String },
    /// Nothing could be judged: why.
    Hold { reason: String },
}

/// A number for people: at most six decimals, no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A sample as a finite number, or why it is not one.
fn finite(name: &str, what: &str, s: &Sample) -> Result<f64, String> {
    match s {
        Ok(v) if v.is_finite() => Ok(*v),
        Ok(v) => Err(format!(
            "query {name}: the {what} value is {v}, not a number to judge (no data?)"
        )),
        Err(e) => Err(format!(
            "query {name}: {}",
            crate::domain::text::excerpt(e, MAX_REASON_CHARS)
        )),
    }
}

/// Judges one query's values against its limits: `Ok(Ok(words))` passes,
/// `Ok(Err(words))` fails, `Err(reason)` holds.
fn judge_one(q: &AnalysisQuery, v: &QueryValues) -> Result<Result<String, String>, String> {
    let name = &q.name;
    let canary = finite(name, "canaries'", &v.canary)?;
    let mut failed = Vec::new();
    let mut passed = Vec::new();
    if let Some(max) = q.max {
        let words = format!("canaries {} (max {})", num(canary), num(max));
        if canary > max {
            &mut failed
        } else {
            &mut passed
        }
        .push(words);
    }
    if let Some(min) = q.min {
        let words = format!("canaries {} (min {})", num(canary), num(min));
        if canary < min {
            &mut failed
        } else {
            &mut passed
        }
        .push(words);
    }
    if q.baseline.is_some() {
        let sample = v
            .baseline
            .as_ref()
            .ok_or_else(|| format!("query {name}: no baseline value was fetched"))?;
        let base = finite(name, "baseline", sample)?;
        let ratio = q.max_ratio.unwrap_or(1.0);
        let tolerance = q.tolerance.unwrap_or(0.0);
        let limit = base * ratio + tolerance;
        let words = format!(
            "canaries {} vs baseline {} (limit {} = baseline × {} + {})",
            num(canary),
            num(base),
            num(limit),
            num(ratio),
            num(tolerance)
        );
        if canary > limit {
            &mut failed
        } else {
            &mut passed
        }
        .push(words);
    }
    Ok(if failed.is_empty() {
        Ok(format!("{name}: {}", passed.join(", ")))
    } else {
        Err(format!("{name}: {}", failed.join(", ")))
    })
}

/// Judges the values fetched for `spec`'s queries: any query past its limit fails
/// (evidence wins over a query that could not be run); else any query that cannot be
/// judged holds; else it passes.
pub(crate) fn judge(spec: &AnalysisSpec, values: &[QueryValues]) -> Verdict {
    let mut fails: Vec<(String, String)> = Vec::new();
    let mut holds = Vec::new();
    let mut passes = Vec::new();
    for q in &spec.queries {
        let Some(v) = values.iter().find(|v| v.name == q.name) else {
            holds.push(format!("query {}: no value was fetched", q.name));
            continue;
        };
        match judge_one(q, v) {
            Ok(Ok(words)) => passes.push(words),
            Ok(Err(words)) => fails.push((q.name.clone(), words)),
            Err(reason) => holds.push(reason),
        }
    }
    if let Some((query, _)) = fails.first() {
        Verdict::Fail {
            query: query.clone(),
            message: fails
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        }
    } else if !holds.is_empty() {
        Verdict::Hold {
            reason: holds.join("; "),
        }
    } else {
        Verdict::Pass {
            message: passes.join("; "),
        }
    }
}

/// Records `verdict`, measured at `now`, in `status`: a pass adds to the run of
/// passes, a hold breaks it, a failure latches.
pub fn record(status: &mut AnalysisStatus, verdict: Verdict, now: Timestamp) {
    status.evaluated_at = Some(now);
    match verdict {
        Verdict::Pass { message } => {
            status.passes = status.passes.saturating_add(1);
            status.held = false;
            status.message = message;
        }
        Verdict::Fail { message, .. } => {
            status.passes = 0;
            status.held = false;
            status.failed = true;
            status.message = message;
        }
        Verdict::Hold { reason } => {
            status.passes = 0;
            status.held = true;
            status.message = reason;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(queries: Vec<AnalysisQuery>) -> AnalysisSpec {
        AnalysisSpec {
            queries,
            interval: None,
            passes: Some(2),
        }
    }

    fn max_query(name: &str, max: f64) -> AnalysisQuery {
        AnalysisQuery {
            name: name.into(),
            query: "q".into(),
            max: Some(max),
            ..AnalysisQuery::default()
        }
    }

    fn compare(name: &str, ratio: f64, tolerance: f64) -> AnalysisQuery {
        AnalysisQuery {
            name: name.into(),
            query: "q".into(),
            baseline: Some("b".into()),
            max_ratio: Some(ratio),
            tolerance: Some(tolerance),
            ..AnalysisQuery::default()
        }
    }

    fn val(name: &str, canary: Sample, baseline: Option<Sample>) -> QueryValues {
        QueryValues {
            name: name.into(),
            canary,
            baseline,
        }
    }

    #[test]
    fn placeholders_are_filled_escaped_for_promql() {
        let vars = Vars {
            group: "we\"b".into(),
            version: "1.3.0".into(),
            start_version: "1.2.0".into(),
            canary_hosts: vec!["web.1".into(), "".into(), "a|b".into()],
            canary_host_ids: vec![],
            canary_updater_ids: vec!["u1".into()],
        };
        let q = r#"rate(x{group="{{group}}",host=~"{{canary_hosts}}",v="{{version}}",id=~"{{canary_updater_ids}}"}[1m])"#;
        assert_eq!(
            render(q, &vars).unwrap(),
            r#"rate(x{group="we\"b",host=~"a\\|b|web\\.1",v="1.3.0",id=~"u1"}[1m])"#
        );
        // No canary value to select by: never an empty regex (it matches unlabelled series).
        let e = render(r#"x{h=~"{{canary_host_ids}}"}"#, &vars).unwrap_err();
        assert!(e.contains("canary_host_ids"), "{e}");
        // Nor a value of control characters only, alone or beside others: cleaned first.
        let hostile = Vars {
            canary_hosts: vec!["\u{1}\u{7}".into(), "\t\n".into()],
            group: "\u{1b}".into(),
            ..vars.clone()
        };
        let e = render(r#"x{h=~"{{canary_hosts}}"}"#, &hostile).unwrap_err();
        assert!(e.contains("canary_hosts"), "{e}");
        let mixed = Vars {
            canary_hosts: vec!["\u{1}".into(), "web\u{7}1".into()],
            ..vars.clone()
        };
        assert_eq!(
            render(r#"x{h=~"{{canary_hosts}}"}"#, &mixed).unwrap(),
            r#"x{h=~"web1"}"#
        );
        let e = render(r#"x{g="{{group}}"}"#, &hostile).unwrap_err();
        assert!(e.contains("{{group}} is empty"), "{e}");
        assert!(render("x{{nope}}", &vars).is_err());
        assert_eq!(
            unknown_placeholders("a {{group}} {{nope}} {{x"),
            ["{{nope}}", "{{x"]
        );
        assert!(unknown_placeholders(q).is_empty());
    }

    #[test]
    fn thresholds_and_comparisons_pass_fail_or_hold() {
        let s = spec(vec![max_query("errors", 0.05), compare("vs", 1.5, 0.001)]);
        let ok = [
            val("errors", Ok(0.01), None),
            val("vs", Ok(0.015), Some(Ok(0.01))),
        ];
        assert!(matches!(judge(&s, &ok), Verdict::Pass { .. }));
        // Just past the comparison's limit: 0.01 × 1.5 + 0.001 = 0.016.
        let over = [
            val("errors", Ok(0.01), None),
            val("vs", Ok(0.0161), Some(Ok(0.01))),
        ];
        let Verdict::Fail { query, message } = judge(&s, &over) else {
            panic!("{:?}", judge(&s, &over));
        };
        assert_eq!(query, "vs");
        assert!(
            message.contains("0.0161") && message.contains("baseline 0.01"),
            "{message}"
        );
        // A threshold crossed.
        let Verdict::Fail { query, .. } =
            judge(&s, &[val("errors", Ok(0.06), None), ok[1].clone()])
        else {
            panic!()
        };
        assert_eq!(query, "errors");
        // A failure wins over a query that could not run.
        let both = [
            val("errors", Ok(0.5), None),
            val("vs", Err("connection refused".into()), None),
        ];
        assert!(matches!(judge(&s, &both), Verdict::Fail { .. }));
    }

    #[test]
    fn anything_not_a_number_holds_fail_closed() {
        let s = spec(vec![max_query("errors", 0.05), compare("vs", 1.0, 0.0)]);
        let good_vs = val("vs", Ok(0.0), Some(Ok(0.0)));
        for (bad, says) in [
            (val("errors", Ok(f64::NAN), None), "NaN"),
            (val("errors", Ok(f64::INFINITY), None), "inf"),
            (
                val("errors", Err("prometheus unreachable".into()), None),
                "unreachable",
            ),
        ] {
            let v = judge(&s, &[bad, good_vs.clone()]);
            let Verdict::Hold { reason } = v else {
                panic!("{v:?}")
            };
            assert!(
                reason.contains(says) && reason.contains("errors"),
                "{reason}"
            );
        }
        // A value missing, a baseline missing or NaN.
        let ok = val("errors", Ok(0.0), None);
        for vs in [
            None,
            Some(val("vs", Ok(0.0), None)),
            Some(val("vs", Ok(0.0), Some(Ok(f64::NAN)))),
        ] {
            let values: Vec<_> = std::iter::once(ok.clone()).chain(vs).collect();
            assert!(
                matches!(judge(&s, &values), Verdict::Hold { .. }),
                "{values:?}"
            );
        }
        // A huge error text is cut.
        let long = "x".repeat(100_000);
        let Verdict::Hold { reason } = judge(&s, &[val("errors", Err(long), None), good_vs]) else {
            panic!()
        };
        assert!(reason.len() < 2 * MAX_REASON_CHARS, "{}", reason.len());
    }

    #[test]
    fn passes_count_in_a_row_holds_break_the_run_failures_latch() {
        let at = |m: i64| {
            "2026-11-23T12:00:00Z"
                .parse::<Timestamp>()
                .unwrap()
                .saturating_add(SignedDuration::from_mins(m))
                .unwrap()
        };
        let mut st = AnalysisStatus::default();
        let pass = || Verdict::Pass {
            message: "ok".into(),
        };
        record(&mut st, pass(), at(0));
        record(
            &mut st,
            Verdict::Hold {
                reason: "down".into(),
            },
            at(1),
        );
        assert_eq!((st.passes, st.held), (0, true));
        record(&mut st, pass(), at(2));
        record(&mut st, pass(), at(3));
        assert_eq!((st.passes, st.held, st.failed), (2, false, false));
        record(
            &mut st,
            Verdict::Fail {
                query: "q".into(),
                message: "q: canaries 2 (max 1)".into(),
            },
            at(4),
        );
        assert!(st.failed && st.passes == 0);
        assert_eq!(st.evaluated_at, Some(at(4)));
    }
}
