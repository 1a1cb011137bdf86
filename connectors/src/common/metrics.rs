//! The upstream requests every connector sends, counted and timed in one
//! place ([`crate::common::http`]). Recording goes through the `metrics`
//! facade: a no-op until a process installs a recorder.
//!
//! The `status` label is bounded: the codes the platforms' documentation
//! gives a meaning to are kept as they are, any other answer becomes its
//! class (`2xx` … `5xx`), and a request that got no answer is `error`.

use std::time::Duration;

use cmcp_domain::Platform;

/// Requests sent upstream by `platform` and `status`.
pub const UPSTREAM_REQUESTS: &str = "cmcp_upstream_requests_total";
/// Seconds from sending a request to having read its whole body, by
/// `platform`.
pub const UPSTREAM_REQUEST_SECONDS: &str = "cmcp_upstream_request_duration_seconds";

/// Buckets of [`UPSTREAM_REQUEST_SECONDS`]: a cached 304 takes
/// milliseconds, a large page of a slow platform seconds, and the client's
/// timeout is 30 s by default.
pub const UPSTREAM_REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Every histogram of this crate with its buckets, for the process that
/// installs the recorder.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[(UPSTREAM_REQUEST_SECONDS, UPSTREAM_REQUEST_BUCKETS)];

/// Codes kept as themselves in the `status` label.
const KEPT: [u16; 16] = [
    200, 201, 204, 304, 400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503, 504,
];

/// The `status` label of an answer (`None`: no answer arrived).
pub fn status_label(status: Option<u16>) -> &'static str {
    const NAMES: [&str; 16] = [
        "200", "201", "204", "304", "400", "401", "403", "404", "409", "410", "422", "429", "500",
        "502", "503", "504",
    ];
    let Some(code) = status else {
        return "error";
    };
    if let Some(i) = KEPT.iter().position(|k| *k == code) {
        return NAMES[i];
    }
    match code / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        _ => "other",
    }
}

/// One request that ended (answered or not) after `elapsed`.
pub fn upstream_request(platform: Platform, status: Option<u16>, elapsed: Duration) {
    metrics::counter!(UPSTREAM_REQUESTS, "platform" => platform.as_str(), "status" => status_label(status))
        .increment(1);
    metrics::histogram!(UPSTREAM_REQUEST_SECONDS, "platform" => platform.as_str())
        .record(elapsed.as_secs_f64());
}

/// Help texts for the exporter.
pub fn describe() {
    metrics::describe_counter!(
        UPSTREAM_REQUESTS,
        "Requests sent to the platforms, by platform and answer status (code or class)"
    );
    metrics::describe_histogram!(
        UPSTREAM_REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Time from sending an upstream request to having read its body"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_label_is_a_known_code_a_class_or_error() {
        assert_eq!(status_label(Some(200)), "200");
        assert_eq!(status_label(Some(429)), "429");
        assert_eq!(status_label(Some(418)), "4xx");
        assert_eq!(status_label(Some(599)), "5xx");
        assert_eq!(status_label(Some(999)), "other");
        assert_eq!(status_label(None), "error");
        for code in KEPT {
            assert_eq!(status_label(Some(code)), code.to_string());
        }
    }
}
