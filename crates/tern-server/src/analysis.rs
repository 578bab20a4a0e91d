//! Canary analysis, ternd's part: run the queries the core says are due
//! (`tern_core::reconcile::analysis_requests`) against Prometheus' HTTP API and hand the values
//! back to the reconcile. Nothing here judges: every failure to get one number
//! (unreachable, an HTTP or query error, no series, several, an answer too large or
//! not Prometheus') becomes the reason the core holds the group with.

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
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| {
                format!("reading Prometheus' answer (HTTP {status}, at most {MAX_BODY} bytes): {e}")
            })?;
        one_number(status, &bytes)
    }
}

/// The one number of a `/api/v1/query` answer, or why it holds none.
pub(crate) fn one_number(status: u16, body: &[u8]) -> Sample {
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
    let data = &v["data"];
    let pair = match data["resultType"].as_str() {
        Some("scalar") => &data["result"],
        Some("vector") => {
            let series = data["result"].as_array().map_or(0, Vec::len);
            match series {
                0 => {
                    return Err(
                        "no data: the query returned no series (are the canaries scraped yet?)"
                            .into(),
                    );
                }
                1 => &data["result"][0]["value"],
                n => {
                    return Err(format!(
                        "the query returned {n} series where one number is needed (aggregate it, e.g. with sum)"
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "the query returned a {} where one number is needed",
                tern_core::text::excerpt(other.unwrap_or("nothing"), 20)
            ));
        }
    };
    // `[ <unix time>, "<value>" ]`: Prometheus sends the number as a string.
    let text = pair[1]
        .as_str()
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

    #[test]
    fn only_one_finite_or_not_number_is_taken_from_an_answer() {
        let ok = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"0.25"]}]}}"#;
        assert_eq!(one_number(200, ok), Ok(0.25));
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"3"]}}"#;
        assert_eq!(one_number(200, scalar), Ok(3.0));
        // NaN comes back as a number: the core refuses to judge it.
        let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert!(one_number(200, nan).unwrap().is_nan());
        for (body, says) in [
            (
                &br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#[..],
                "no data",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]},{"value":[1,"2"]}]}}"#,
                "2 series",
            ),
            (
                br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                "bad_data",
            ),
            (
                br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                "matrix",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"many"]}]}}"#,
                "not a number",
            ),
            (b"<html>proxy error</html>", "not its JSON"),
        ] {
            let e = one_number(400, body).unwrap_err();
            assert!(e.contains(says), "{e}");
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
