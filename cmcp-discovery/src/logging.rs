use tracing_subscriber::EnvFilter;

/// Logs go to stderr so that `--json` output on stdout stays parseable.
pub fn init(filter: &str, format: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
