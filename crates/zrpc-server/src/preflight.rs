//! The start-time checks that need no network, all at once: what `zrpcctl conf check` reports,
//! so that a config it accepts does not fail at start for a reason it could have seen.

use std::path::Path;

use zrpc_core::conf::feature_on;

use crate::Error;
use crate::conf::RpcServerConf;

/// Every problem a start of a server from `conf` would meet before it needs the network,
/// each naming its key and file: `Etcd` settings, the `Tls` files (readable, valid PEM, a key
/// matching the certificate, the client CA), a `Log.Path` where the log files cannot be
/// created (tried, and what was created removed again), and with
/// `Auth` the `Redis` options the token store refuses. Empty when there is none. `conf` is
/// assumed loaded (so validated) by [`conf::load`](zrpc_core::conf::load), whose file the
/// errors name as a start's do; a key that needs a cargo feature this build leaves out is
/// reported all the same (a config built in code).
pub fn preflight(conf: &RpcServerConf) -> Vec<Error> {
    let mut errors = Vec::new();
    if let Err(e) = crate::conf::features::check(conf) {
        errors.push(e.into());
    }
    if let Err(e) = crate::registry::check(conf) {
        errors.push(e);
    }
    // Without the `tls` feature the feature check above has named the `Tls` block.
    if feature_on("tls", cfg!(feature = "tls"))
        && let Some(tls) = &conf.tls
        && let Err(e) = crate::tls::ServerTls::load(tls)
    {
        errors.push(e.into());
    }
    if conf.log.writes_files()
        && let Err(e) = try_log_dir(&crate::telemetry::log_dir(conf))
    {
        errors.push(Error::Telemetry(e));
    }
    #[cfg(feature = "redis-auth")]
    if let Some(redis) = conf
        .redis
        .as_ref()
        .filter(|r| conf.auth && !r.redis.host.is_empty() && feature_on("redis-auth", true))
        && let Err(e) = crate::auth::connection_info(redis)
    {
        errors.push(e);
    }
    errors.into_iter().map(|e| e.in_file(conf.file())).collect()
}

/// Whether a start could write its logs in `dir`, found by doing what a start does: create the
/// directory and open `access.log` and `error.log` for appending. Permission bits cannot say
/// (root writes into a 0555 directory; a user cannot write under a root-owned parent that looks
/// writable to a bits check). What this created is removed again; existing files are not touched.
fn try_log_dir(dir: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| {
        format!(
            "Log.Path: cannot create the log directory {}: {e}",
            dir.display()
        )
    };
    let created: Vec<&Path> = dir.ancestors().take_while(|a| !a.exists()).collect();
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut result = Ok(());
    let mut new_files = Vec::new();
    for name in [crate::telemetry::ACCESS_LOG, crate::telemetry::ERROR_LOG] {
        let file = dir.join(name);
        let existed = file.exists();
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
        {
            Ok(_) if !existed => new_files.push(file),
            Ok(_) => {}
            Err(e) => {
                result = Err(format!("Log: cannot open {}: {e}", file.display()));
                break;
            }
        }
    }
    for file in new_files {
        let _ = std::fs::remove_file(file);
    }
    // deepest first; only directories this check created, and only while they are empty
    for d in created {
        let _ = std::fs::remove_dir(d);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::ServerTlsConf;

    #[test]
    fn every_problem_is_reported_not_only_the_first() {
        let dir = std::env::temp_dir().join(format!("zrpc-preflight-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let mut conf = RpcServerConf::new("a", "127.0.0.1:0");
        assert!(preflight(&conf).is_empty());
        conf.log.mode = "file".into();
        conf.log.path = file.join("logs").to_string_lossy().into_owned();
        conf.tls = Some(ServerTlsConf::new(
            dir.join("missing.pem").to_string_lossy(),
            dir.join("missing.key").to_string_lossy(),
        ));
        let errors: Vec<String> = preflight(&conf).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(!file.join("logs").exists());
        // the missing file, or without the `tls` feature the block itself (named once)
        let tls = if cfg!(feature = "tls") {
            "missing.pem\": cannot read"
        } else {
            "`tls` cargo feature"
        };
        assert!(
            errors
                .iter()
                .any(|e| e.contains("Tls.CertFile") && e.contains(tls)),
            "{errors:#?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("Log.Path: cannot create the log directory")
                    && e.contains("a-file/logs")),
            "{errors:#?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_log_dir_is_judged_by_trying_and_left_as_found() {
        let tmp = std::env::temp_dir().join(format!("zrpc-preflight-log-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut conf = RpcServerConf::new("a", "127.0.0.1:0");
        conf.log.mode = "file".into();
        conf.log.path = tmp.join("a/b").to_string_lossy().into_owned();
        assert!(preflight(&conf).is_empty());
        assert!(!tmp.join("a").exists(), "the check leaves nothing behind");

        // A directory whose bits say read-only: root writes there anyway (so its start works),
        // anyone else cannot. The check agrees with what a write actually does.
        let ro = tmp.join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        let writable = std::fs::create_dir(ro.join("probe")).is_ok();
        let _ = std::fs::remove_dir(ro.join("probe"));
        conf.log.path = ro.join("logs").to_string_lossy().into_owned();
        let errors: Vec<String> = preflight(&conf).iter().map(ToString::to_string).collect();
        assert_eq!(errors.is_empty(), writable, "{errors:#?}");
        assert!(!ro.join("logs").exists());
        std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_key_that_needs_a_feature_left_out_is_reported() {
        let mut conf = RpcServerConf::new("a", "127.0.0.1:0");
        conf.etcd = zrpc_core::conf::EtcdConf::new(["127.0.0.1:2379"], "a.rpc");
        let errors: Vec<String> = preflight(&conf).iter().map(ToString::to_string).collect();
        if cfg!(feature = "etcd") {
            assert!(errors.is_empty(), "{errors:#?}");
        } else {
            assert_eq!(errors.len(), 1, "{errors:#?}");
            assert!(
                errors[0].contains("Etcd.Hosts") && errors[0].contains("`etcd` cargo feature"),
                "{errors:#?}"
            );
        }
    }
}
