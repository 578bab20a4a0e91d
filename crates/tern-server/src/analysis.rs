//! Canary analysis, ternd's part: run the queries the core says are due
//! (`tern_core::reconcile::analysis_requests`) against Prometheus' HTTP API and hand the values
//! back to the reconcile. Nothing here judges: every failure to get one number
//! (unreachable, a status other than 2xx, a query error, a partial answer, an answer
//! that is not JSON, not one sample of an instant vector, too large) becomes the reason
//! the core holds the group with.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tern_core::analysis::{Measured, QueryValues, RenderedQuery, Request, Sample};

/// The largest answer read from Prometheus: one number needs far less.
const MAX_BODY: u64 = 256 * 1024;
/// Characters of Prometheus' own error kept (it may echo the query).
const MAX_ERROR_CHARS: usize = 200;

/// A Prometheus server's query API (`--prometheus-url`).
#[derive(Clone)]
pub struct Prometheus {
    agent: ureq::Agent,
    /// `…/api/v1/query`.
    query_url: String,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("query_url", &self.query_url)
            .finish_non_exhaustive()
    }
}

impl Prometheus {
    /// `url` is Prometheus' base (`http://prometheus:9090`, or with a path prefix).
    pub fn new(url: &str, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(timeout))
            .user_agent(concat!("ternd/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            agent,
            query_url: format!("{}/api/v1/query", url.trim_end_matches('/')),
        }
    }

    /// One instant query (blocking): its one number, or why there is none.
    pub(crate) fn query(&self, promql: &str) -> Sample {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        let mut resp = self
            .agent
            .post(&self.query_url)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(body)
            .map_err(|e| format!("Prometheus at {} unreachable: {e}", self.query_url))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| {
                format!("reading Prometheus' answer (HTTP {status}, at most {MAX_BODY} bytes): {e}")
            })?;
        one_number(status, content_type.as_deref(), &bytes)
    }
}

/// Whether `content_type` says JSON (`application/json`, parameters allowed).
fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The one number of a `/api/v1/query` answer, or why it holds none. Only a complete
/// answer counts: HTTP 2xx, JSON said so, `status: success` without `warnings` (a
/// partial answer: a shard or a remote store missing), and exactly one sample of an
/// instant vector, whose value is a number. Anything else (an error page in front of
/// Prometheus, a scalar that no series stands behind) is a reason, never a value.
pub(crate) fn one_number(status: u16, content_type: Option<&str>, body: &[u8]) -> Sample {
    if !(200..300).contains(&status) {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let why = tern_core::text::excerpt(v["error"].as_str().unwrap_or(""), MAX_ERROR_CHARS);
        return Err(format!(
            "Prometheus answered HTTP {status}, not a success ({}): {why}",
            v["errorType"].as_str().unwrap_or("no error type")
        ));
    }
    if !is_json(content_type) {
        return Err(format!(
            "Prometheus answered HTTP {status} with content type {:?}, not application/json",
            tern_core::text::excerpt(content_type.unwrap_or("(none)"), 40)
        ));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        format!("Prometheus answered HTTP {status} with something that is not its JSON")
    })?;
    if v["status"] != "success" {
        let kind = v["errorType"].as_str().unwrap_or("unknown");
        let why = tern_core::text::excerpt(v["error"].as_str().unwrap_or(""), MAX_ERROR_CHARS);
        return Err(format!(
            "Prometheus refused the query (HTTP {status}, {kind}): {why}"
        ));
    }
    if let Some(w) = v.get("warnings").filter(|w| !w.is_null()) {
        let first = w
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(format!(
            "Prometheus' answer is partial (warnings: {}): it is not judged",
            tern_core::text::excerpt(first, MAX_ERROR_CHARS)
        ));
    }
    let data = &v["data"];
    match data["resultType"].as_str() {
        Some("vector") => {}
        other => {
            return Err(format!(
                "the query returned a {} where one series is needed (an instant vector of one sample: aggregate it, e.g. with sum, or wrap a scalar in vector())",
                tern_core::text::excerpt(other.unwrap_or("nothing"), 20)
            ));
        }
    }
    let pair = match data["result"].as_array().map(Vec::as_slice) {
        None => return Err("Prometheus' answer has no result list".into()),
        Some([]) => {
            return Err(
                "no data: the query returned no series (are the canaries scraped yet?)".into(),
            );
        }
        Some([one]) => &one["value"],
        Some(many) => {
            return Err(format!(
                "the query returned {} series where one number is needed (aggregate it, e.g. with sum)",
                many.len()
            ));
        }
    };
    // `[ <unix time>, "<value>" ]`: Prometheus sends the number as a string.
    let text = match pair.as_array().map(Vec::as_slice) {
        Some([_, v]) => v.as_str(),
        _ => None,
    }
    .ok_or("Prometheus' answer has no value where one was expected")?;
    text.parse::<f64>().map_err(|_| {
        format!(
            "Prometheus' value {:?} is not a number",
            tern_core::text::excerpt(text, 40)
        )
    })
}

/// Why a group cannot be measured when no Prometheus is configured.
const NO_PROMETHEUS: &str =
    "ternd has no --prometheus-url: the analysis cannot be run, so the group holds";

/// Runs `requests` (blocking; call it from `spawn_blocking`).
fn measure_blocking(prometheus: Option<&Prometheus>, requests: &[Request]) -> Vec<Measured> {
    let run = |q: &Result<String, String>| -> Sample {
        let promql = q
            .as_ref()
            .map_err(|e| format!("the query cannot be filled in: {e}"))?;
        match prometheus {
            Some(p) => p.query(promql),
            None => Err(NO_PROMETHEUS.into()),
        }
    };
    requests
        .iter()
        .map(|r| Measured {
            group: r.group.clone(),
            values: r
                .queries
                .iter()
                .map(|q: &RenderedQuery| QueryValues {
                    name: q.name.clone(),
                    canary: run(&q.query),
                    baseline: q.baseline.as_ref().map(run),
                })
                .collect(),
        })
        .collect()
}

/// Runs the analyses due, off the async threads. A task that cannot run measures
/// every query as unavailable: the groups hold, they never pass for it.
pub(crate) async fn measure(
    prometheus: Option<Arc<Prometheus>>,
    requests: Vec<Request>,
) -> Vec<Measured> {
    if requests.is_empty() {
        return Vec::new();
    }
    let fallback: Vec<Measured> = requests
        .iter()
        .map(|r| Measured {
            group: r.group.clone(),
            values: Vec::new(),
        })
        .collect();
    match tokio::task::spawn_blocking(move || measure_blocking(prometheus.as_deref(), &requests))
        .await
    {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "the canary analysis task failed");
            fallback
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Option<&str> = Some("application/json");

    #[test]
    fn only_one_vector_sample_of_a_complete_answer_is_taken() {
        let ok = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"0.25"]}]}}"#;
        assert_eq!(one_number(200, JSON, ok), Ok(0.25));
        assert_eq!(
            one_number(200, Some("Application/JSON; charset=utf-8"), ok),
            Ok(0.25)
        );
        // NaN comes back as a number: the core refuses to judge it.
        let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert!(one_number(200, JSON, nan).unwrap().is_nan());
        let warned = br#"{"status":"success","warnings":["remote store unreachable"],"data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"0.25"]}]}}"#;
        for (status, content_type, body, says) in [
            (
                200,
                JSON,
                &br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#[..],
                "no data",
            ),
            (
                200,
                JSON,
                br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]},{"value":[1,"2"]}]}}"#,
                "2 series",
            ),
            (
                400,
                JSON,
                br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                "bad_data",
            ),
            (
                200,
                JSON,
                br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                "matrix",
            ),
            (
                200,
                JSON,
                br#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"0.001"]}}"#,
                "scalar",
            ),
            (
                200,
                JSON,
                br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"many"]}]}}"#,
                "not a number",
            ),
            (
                200,
                JSON,
                br#"{"status":"success","data":{"resultType":"vector","result":[{"value":"0.1"}]}}"#,
                "no value",
            ),
            (200, Some("text/html"), b"<html>proxy error</html>", "text/html"),
            // A success body is no success under an error status, nor under another type.
            (503, JSON, ok, "HTTP 503"),
            (404, JSON, ok, "HTTP 404"),
            (200, Some("text/plain"), ok, "text/plain"),
            (200, None, ok, "(none)"),
            (200, JSON, warned, "partial"),
            (200, JSON, b"not json", "not its JSON"),
        ] {
            let e = one_number(status, content_type, body).unwrap_err();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn without_prometheus_or_a_query_every_value_is_a_reason() {
        let req = [Request {
            group: "prod".into(),
            queries: vec![RenderedQuery {
                name: "errors".into(),
                query: Ok("up".into()),
                baseline: Some(Err("no canary has a value for {{canary_hosts}}".into())),
            }],
        }];
        let m = measure_blocking(None, &req);
        assert!(
            m[0].values[0]
                .canary
                .as_ref()
                .unwrap_err()
                .contains("--prometheus-url")
        );
        let unreachable = Prometheus::new("http://127.0.0.1:9", Duration::from_secs(2));
        let m = measure_blocking(Some(&unreachable), &req);
        assert!(
            m[0].values[0]
                .canary
                .as_ref()
                .unwrap_err()
                .contains("unreachable"),
            "{:?}",
            m[0].values[0].canary
        );
        let b = m[0].values[0]
            .baseline
            .as_ref()
            .unwrap()
            .as_ref()
            .unwrap_err();
        assert!(b.contains("cannot be filled in"), "{b}");
    }
}
