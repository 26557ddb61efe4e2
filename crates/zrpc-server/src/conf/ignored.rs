//! go-zero keys zrpc accepts but does not act on, listed so the server can say so once at start.
//!
//! A key is listed only when its value would change what go-zero does: a present `Redis` block,
//! a non-empty `MetricsUrl`, `Log.MaxContentLength` above 0, the rotation keys when logs go to
//! files, and so on. A key left at go-zero's default (or one that has no effect in go-zero either,
//! such as `Log.KeepDays` in console mode) is not listed.

use std::fmt;

use super::{LogConf, LogFieldKeys, RpcServerConf};

/// A key zrpc accepts for go-zero compatibility but does not act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IgnoredKey {
    /// The key path, e.g. `Redis`.
    pub key: &'static str,
    /// Why it is ignored and what to use instead.
    pub reason: &'static str,
}

impl fmt::Display for IgnoredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config key `{}` is ignored: {}", self.key, self.reason)
    }
}

impl RpcServerConf {
    /// The keys that were set but that zrpc accepts without acting on them (for the server to log
    /// once at start-up, at WARN). See `docs/configuration.md` for the full table.
    pub fn ignored_keys(&self) -> Vec<IgnoredKey> {
        let mut out = Vec::new();
        let mut push = |on: bool, key: &'static str, reason: &'static str| {
            if on {
                out.push(IgnoredKey { key, reason });
            }
        };
        // `Redis` is used by `Auth: true` (as in go-zero) and, like go-zero, unused without it.
        push(
            self.redis
                .as_ref()
                .is_some_and(|r| r.redis.maint_notifications != "disabled"),
            "Redis.MaintNotifications",
            "the Redis client of the token store does not handle maintenance notifications",
        );
        push(
            self.profiling.is_some(),
            "Profiling",
            "continuous profiling (Pyroscope) is not implemented",
        );
        push(
            !self.metrics_url.is_empty(),
            "MetricsUrl",
            "go-zero's stat report POST is not implemented; scrape DevServer /metrics",
        );
        push(
            self.prometheus.is_some(),
            "Prometheus",
            "deprecated in go-zero; metrics are served by DevServer",
        );
        // Only an `EnablePprof: true` in the file: go-zero's default is true too, but a user
        // who never wrote the key has nothing to change.
        push(
            self.dev_server
                .as_ref()
                .is_some_and(|d| d.enabled && d.enable_pprof == Some(true)),
            "DevServer.EnablePprof",
            "Go pprof endpoints do not exist in Rust",
        );
        if let Some(t) = self
            .telemetry
            .as_ref()
            .filter(|t| !t.endpoint.is_empty() && !t.disabled)
        {
            // as in go-zero, the OTLP/HTTP keys mean nothing to the other batchers
            let other = t.batcher != "otlphttp";
            push(
                other && !t.otlp_http_path.is_empty(),
                "Telemetry.OtlpHttpPath",
                "used only by the otlphttp batcher",
            );
            push(
                other && t.otlp_http_secure,
                "Telemetry.OtlpHttpSecure",
                "used only by the otlphttp batcher",
            );
        }
        log_keys(&self.log, &mut push);
        out
    }
}

fn log_keys(log: &LogConf, push: &mut impl FnMut(bool, &'static str, &'static str)) {
    push(
        !log.time_format.is_empty(),
        "Log.TimeFormat",
        "timestamps are always RFC 3339 in UTC",
    );
    push(
        log.max_content_length > 0,
        "Log.MaxContentLength",
        "log content is not truncated",
    );
    push(
        log.stack_cooldown_millis != LogConf::default().stack_cooldown_millis,
        "Log.StackCooldownMillis",
        "panic stacks are logged every time, without a cooldown",
    );
    push(
        log.field_keys != LogFieldKeys::default(),
        "Log.FieldKeys",
        "JSON lines use tracing's field names (timestamp, level, fields.message, target, span)",
    );
    if !log.writes_files() {
        return;
    }
    // go-zero rotates its files daily by default; zrpc appends to them and never rotates
    // (docs/configuration.md says so). Only a `Rotation` other than go-zero's default is a key
    // someone wrote to change something.
    push(
        log.rotation != LogConf::default().rotation,
        "Log.Rotation",
        "zrpc does not rotate its log files; rotate them with logrotate's copytruncate",
    );
    push(
        log.keep_days > 0,
        "Log.KeepDays",
        "zrpc does not rotate or delete its log files",
    );
    push(
        log.max_backups > 0,
        "Log.MaxBackups",
        "zrpc does not rotate or delete its log files",
    );
    push(
        log.max_size > 0,
        "Log.MaxSize",
        "zrpc does not rotate its log files by size",
    );
    push(
        log.compress,
        "Log.Compress",
        "zrpc does not compress log files",
    );
    push(
        !log.file_time_format.is_empty(),
        "Log.FileTimeFormat",
        "zrpc does not rotate its log files, so it names none by time",
    );
}

// The test loads `DevServer` blocks, which need the `devserver` feature.
#[cfg(all(test, feature = "devserver"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::RpcServerConf;

    fn ignored(yaml: &str) -> Vec<&'static str> {
        let text = format!("Name: a\nListenOn: 127.0.0.1:1\n{yaml}");
        let c: RpcServerConf = zrpc_core::conf::from_str_with_env(
            &text,
            zrpc_core::conf::Format::Yaml,
            "greet.yaml",
            |_| None,
        )
        .unwrap();
        c.ignored_keys().iter().map(|k| k.key).collect()
    }

    #[test]
    fn file_logs_warn_about_rotation_only_when_the_file_asks_for_one() {
        // nobody wrote `Rotation`: no warning about it
        assert!(ignored("Log: {Mode: file}\n").is_empty());
        assert!(ignored("Log: {Mode: file, Rotation: daily}\n").is_empty());
        assert_eq!(
            ignored("Log: {Mode: file, Rotation: size}\n"),
            ["Log.Rotation"]
        );
        assert_eq!(
            ignored("Log: {Mode: file, KeepDays: 7}\n"),
            ["Log.KeepDays"]
        );
    }

    #[test]
    fn enable_pprof_is_reported_only_when_the_file_sets_it_true() {
        // go-zero's default is true, but nobody wrote the key: nothing to warn about
        assert!(ignored("DevServer: {Enabled: true}\n").is_empty());
        assert!(ignored("DevServer: {EnablePprof: false}\n").is_empty());
        assert!(ignored("DevServer: {Enabled: false, EnablePprof: true}\n").is_empty());
        assert_eq!(
            ignored("DevServer: {Enabled: true, EnablePprof: true}\n"),
            ["DevServer.EnablePprof"]
        );
        let c: RpcServerConf = zrpc_core::conf::from_str_with_env(
            "Name: a\nListenOn: 127.0.0.1:1\nDevServer: {}\n",
            zrpc_core::conf::Format::Yaml,
            "greet.yaml",
            |_| None,
        )
        .unwrap();
        let d = c.dev_server.unwrap();
        assert_eq!(
            (d.enable_pprof, d.pprof()),
            (None, true),
            "go-zero's default"
        );
    }
}
