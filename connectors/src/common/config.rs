//! HTTP behaviour settings shared by every platform connector, embeddable in
//! the binary's config file.
//!
//! Durations are written the way an operator would (`"250ms"`, `"30s"`,
//! `"15m"`, `"1h"`); a bare number is seconds. Unknown keys are rejected so a
//! typo in a config file is an error, not a silently ignored setting.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{ConnectorError, Result};

/// How a connector talks HTTP: timeouts, retries, rate-limit patience, page
/// size. Every field has a default; a config file sets only what differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Whole-request timeout, body included (GitHub itself gives up on a
    /// request after 10 s, so 30 s only trips on a stuck connection).
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// Tries per request, the first included.
    pub max_attempts: u32,
    /// First backoff delay; it doubles per retry (plus up to 100 % jitter).
    #[serde(with = "duration_text")]
    pub backoff_min: Duration,
    /// Cap of the exponential backoff delay (before jitter).
    #[serde(with = "duration_text")]
    pub backoff_max: Duration,
    /// Longest wait for a rate limit to clear; a longer one becomes
    /// [`ConnectorError::RateLimited`] so the job can be rescheduled
    /// instead of holding a worker.
    #[serde(with = "duration_text")]
    pub max_rate_limit_wait: Duration,
    /// First wait after a secondary rate limit without `retry-after`
    /// (GitHub: "at least one minute"), doubling on each repeat.
    #[serde(with = "duration_text")]
    pub secondary_limit_min_wait: Duration,
    /// Stop and wait for the reset when the remaining budget is at or
    /// below this many requests.
    pub budget_reserve: u32,
    /// Items per listing page. Each platform caps it at its own maximum
    /// (GitHub: 100), so one setting serves every connector.
    pub per_page: u32,
    pub user_agent: String,
    /// Requests in flight at once per credential in one process. GitHub
    /// documents a secondary limit of 100 concurrent requests and asks for
    /// restraint; 4 keeps listings fast while staying far below it.
    pub max_concurrency: usize,
    /// A response body larger than this is refused, read no further (a
    /// page of 100 repositories is about 600 KB): an upstream that streams
    /// without end cannot exhaust memory.
    pub max_response_bytes: usize,
    /// Bitbucket Cloud's allowance per credential when the platform reports
    /// none (user API tokens get no rate-limit headers, only a 429): 1,000
    /// repository-data requests per rolling hour ("API request limits",
    /// https://support.atlassian.com/bitbucket-cloud/docs/api-request-limits/;
    /// scaled workspaces get up to 10,000, and access tokens report theirs
    /// in `X-RateLimit-Limit`, which then wins). Raise it for a scaled
    /// workspace used with a user token.
    pub bitbucket_hourly_limit: u32,
    /// The rolling window `bitbucket_hourly_limit` applies to (one hour on
    /// Bitbucket Cloud; shorter only against a simulator).
    #[serde(with = "duration_text")]
    pub bitbucket_limit_window: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            timeout: Duration::from_secs(30),
            max_attempts: 5,
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(15 * 60),
            secondary_limit_min_wait: Duration::from_secs(60),
            budget_reserve: 1,
            per_page: 100,
            user_agent: format!("cmcp-discovery/{}", env!("CARGO_PKG_VERSION")),
            max_concurrency: 4,
            max_response_bytes: 64 * 1024 * 1024,
            bitbucket_hourly_limit: 1000,
            bitbucket_limit_window: Duration::from_secs(3600),
        }
    }
}

impl HttpConfig {
    /// Rejects settings that cannot work (zero attempts, zero timeout,
    /// empty pages).
    pub fn validate(&self) -> Result<()> {
        let bad = |detail: String| Err(ConnectorError::InvalidConfig { detail });
        if self.max_attempts == 0 {
            return bad("http.max_attempts must be at least 1".into());
        }
        if self.timeout.is_zero() {
            return bad("http.timeout must be more than zero".into());
        }
        if self.backoff_min > self.backoff_max {
            return bad(format!(
                "http.backoff_min ({}) is larger than http.backoff_max ({})",
                DurationText(self.backoff_min),
                DurationText(self.backoff_max)
            ));
        }
        if self.per_page == 0 {
            return bad("http.per_page must be at least 1".into());
        }
        if self.max_concurrency == 0 {
            return bad("http.max_concurrency must be at least 1".into());
        }
        if self.bitbucket_hourly_limit == 0 || self.bitbucket_limit_window.is_zero() {
            return bad(
                "http.bitbucket_hourly_limit and http.bitbucket_limit_window must be more than zero"
                    .into(),
            );
        }
        if self.user_agent.trim().is_empty() {
            return bad(
                "http.user_agent must not be empty (GitHub rejects requests without one)".into(),
            );
        }
        Ok(())
    }
}

/// Prints a duration in the unit that shows it exactly: `250ms`, `30s`,
/// `15m`, `1h`.
pub struct DurationText(pub Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return write!(f, "{}us", d.as_micros());
        }
        if d.subsec_millis() != 0 {
            return write!(f, "{}ms", d.as_millis());
        }
        let s = d.as_secs();
        match s {
            0 => f.write_str("0s"),
            s if s % 3600 == 0 => write!(f, "{}h", s / 3600),
            s if s % 60 == 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// Parses `250ms`, `1.5s`, `15m`, `2h`, `100us`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try \"250ms\", \"30s\", \"15m\")"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" | "mins" => 60.0,
        "h" | "hr" | "hrs" => 3600.0,
        other => return Err(format!("unknown duration unit {other:?} in {text:?}")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

/// Serde glue for `Duration` fields written as text or bare seconds.
pub mod duration_text {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&DurationText(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Seconds(u64),
            Fractional(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
            Raw::Seconds(s) => Ok(Duration::from_secs(s)),
            Raw::Fractional(f) => Duration::try_from_secs_f64(f).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = HttpConfig::default();
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.max_attempts, 5);
        assert_eq!(c.backoff_min, Duration::from_millis(250));
        assert_eq!(c.max_rate_limit_wait, Duration::from_secs(900));
        assert_eq!(c.secondary_limit_min_wait, Duration::from_secs(60));
        assert_eq!(c.budget_reserve, 1);
        assert_eq!(c.per_page, 100);
        assert_eq!(c.max_concurrency, 4);
        assert_eq!(c.bitbucket_hourly_limit, 1000);
        assert_eq!(c.bitbucket_limit_window, Duration::from_secs(3600));
        assert!(c.user_agent.starts_with("cmcp-discovery/"));
        c.validate().unwrap();
    }

    #[test]
    fn partial_config_keeps_defaults_and_reads_human_durations() {
        let c: HttpConfig = serde_json::from_str(
            r#"{"timeout": "10s", "backoff_min": "100ms", "max_rate_limit_wait": "15m", "secondary_limit_min_wait": 2}"#,
        )
        .unwrap();
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.backoff_min, Duration::from_millis(100));
        assert_eq!(c.max_rate_limit_wait, Duration::from_secs(900));
        assert_eq!(c.secondary_limit_min_wait, Duration::from_secs(2));
        assert_eq!(c.max_attempts, 5);
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_errors() {
        assert!(serde_json::from_str::<HttpConfig>(r#"{"timeuot": "1s"}"#).is_err());
        assert!(serde_json::from_str::<HttpConfig>(r#"{"timeout": "1 fortnight"}"#).is_err());
    }

    #[test]
    fn durations_round_trip_through_text() {
        let c = HttpConfig {
            backoff_min: Duration::from_millis(1500),
            ..HttpConfig::default()
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains("\"timeout\":\"30s\""), "{json}");
        assert!(json.contains("\"max_rate_limit_wait\":\"15m\""), "{json}");
        let back: HttpConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn validation_rejects_unworkable_settings() {
        for c in [
            HttpConfig {
                max_attempts: 0,
                ..HttpConfig::default()
            },
            HttpConfig {
                per_page: 0,
                ..HttpConfig::default()
            },
            HttpConfig {
                max_concurrency: 0,
                ..HttpConfig::default()
            },
            HttpConfig {
                bitbucket_hourly_limit: 0,
                ..HttpConfig::default()
            },
            HttpConfig {
                bitbucket_limit_window: Duration::ZERO,
                ..HttpConfig::default()
            },
            HttpConfig {
                backoff_min: Duration::from_secs(60),
                backoff_max: Duration::from_secs(1),
                ..HttpConfig::default()
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
