//! The machine and the tools a run uses: facts for the report header, the go-zero program
//! (built from `go/` when Go is installed), h2load, taskset and etcd. A missing tool skips the
//! parts that need it, loudly, in the report.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// What the run found on this machine.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// This binary (for `serve` and `load`).
    pub(crate) me: PathBuf,
    /// `gzbench` (go-zero server and client), or why it is missing.
    pub(crate) gozero: Result<PathBuf, String>,
    /// h2load, or why it is missing.
    pub(crate) h2load: Result<PathBuf, String>,
    /// etcd, or why it is missing.
    pub(crate) etcd: Result<PathBuf, String>,
    /// valgrind (callgrind instruction counts), or why it is missing.
    pub(crate) valgrind: Result<PathBuf, String>,
    /// taskset is installed (pinned mode).
    pub(crate) taskset: bool,
    /// CPUs online.
    pub(crate) cpus: usize,
    /// Report header lines: `(fact, value)`.
    pub(crate) facts: Vec<(String, String)>,
}

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn which(cmd: &str) -> Result<PathBuf, String> {
    output("sh", &["-c", &format!("command -v {cmd}")])
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("{cmd} not found"))
}

impl Env {
    /// Looks around; builds the go-zero program when Go is installed.
    pub(crate) fn detect() -> Result<Env> {
        let me = std::env::current_exe().context("cannot find this program's path")?;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .context("cannot find the repository root")?;
        let gozero = build_gzbench(&root);
        let h2load = which("h2load").map_err(|e| format!("{e} (apt-get install nghttp2-client)"));
        let etcd = which("etcd").map_err(|e| format!("{e} (apt-get install etcd-server)"));
        let valgrind = which("valgrind").map_err(|e| {
            format!("{e}: the instructions column is skipped (apt-get install valgrind)")
        });
        let taskset = which("taskset").is_ok();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let mem = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            })
            .map_or("unknown".into(), |kb| {
                format!("{:.1} GiB", kb / 1024.0 / 1024.0)
            });
        let commit = output("git", &["-C", &root.to_string_lossy(), "rev-parse", "HEAD"])
            .unwrap_or_else(|| "unknown".into());
        let dirty = output(
            "git",
            &[
                "-C",
                &root.to_string_lossy(),
                "status",
                "--porcelain",
                "--untracked-files=no",
            ],
        )
        .is_some_and(|s| !s.is_empty());
        let mut facts = vec![
            (
                "date (UTC)".into(),
                output("date", &["-u", "+%Y-%m-%d %H:%M:%S"]).unwrap_or_default(),
            ),
            (
                "commit".into(),
                format!(
                    "{commit}{}",
                    if dirty {
                        " (working tree has uncommitted changes)"
                    } else {
                        ""
                    }
                ),
            ),
            ("CPU".into(), format!("{cpu_model}, {cpus} CPUs online")),
            ("memory".into(), mem),
            (
                "kernel".into(),
                output("uname", &["-sr"]).unwrap_or_default(),
            ),
            (
                "load average at start".into(),
                std::fs::read_to_string("/proc/loadavg")
                    .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default(),
            ),
            (
                "rustc".into(),
                output("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
            ),
            (
                "go".into(),
                output("go", &["version"]).unwrap_or_else(|| "go not found".into()),
            ),
            ("go-zero".into(), "v1.10.3 (go/go.mod)".into()),
            (
                "h2load".into(),
                match &h2load {
                    Ok(p) => output(&p.to_string_lossy(), &["--version"])
                        .unwrap_or_else(|| "unknown version".into()),
                    Err(e) => e.clone(),
                },
            ),
            (
                "etcd".into(),
                match &etcd {
                    Ok(p) => output(&p.to_string_lossy(), &["--version"])
                        .and_then(|s| s.lines().next().map(str::to_owned))
                        .unwrap_or_else(|| "unknown version".into()),
                    Err(e) => e.clone(),
                },
            ),
        ];
        facts.push((
            "valgrind (instruction counts)".into(),
            match &valgrind {
                Ok(p) => output(&p.to_string_lossy(), &["--version"])
                    .unwrap_or_else(|| "unknown version".into()),
                Err(e) => e.clone(),
            },
        ));
        facts.push((
            "taskset (pinning)".into(),
            if taskset {
                "yes"
            } else {
                "not found: pinned mode skipped"
            }
            .into(),
        ));
        Ok(Env {
            me,
            gozero,
            h2load,
            etcd,
            valgrind,
            taskset,
            cpus,
            facts,
        })
    }

    /// A `Command` for `program`, pinned to `cpu` with taskset when asked and possible.
    pub(crate) fn command(&self, program: &Path, cpu: Option<usize>) -> Command {
        match cpu {
            Some(cpu) if self.taskset => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpu.to_string()).arg(program);
                c
            }
            _ => Command::new(program),
        }
    }
}

/// Builds `go/gzbench` into `target/zrpc-bench/gzbench` with the flags of
/// `interop/gozero/build.sh` (`-tags no_k8s -trimpath -buildvcs=false`, read-only go.mod, local
/// toolchain): both programs pin the same go-zero, so the packages that script compiled are
/// reused from the Go build cache and a fresh CI clone only compiles `main` and links (~8 s
/// instead of minutes with other flags); without VCS stamping an up-to-date binary is not
/// relinked after every commit (< 1 s).
fn build_gzbench(root: &Path) -> Result<PathBuf, String> {
    if output("go", &["version"]).is_none() {
        return Err("go not found (install Go >= 1.24 for the go-zero columns)".into());
    }
    let out_dir = root.join("target").join("zrpc-bench");
    let _ = std::fs::create_dir_all(&out_dir);
    let bin = out_dir.join("gzbench");
    let src = root.join("crates").join("zrpc-bench").join("go");
    let status = Command::new("go")
        .current_dir(&src)
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .args([
            "build",
            "-tags",
            "no_k8s",
            "-trimpath",
            "-buildvcs=false",
            "-o",
        ])
        .arg(&bin)
        .arg("./gzbench")
        .output();
    match status {
        Ok(o) if o.status.success() => Ok(bin),
        Ok(o) => Err(format!(
            "building go/gzbench failed: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .take(5)
                .collect::<Vec<_>>()
                .join(" / ")
        )),
        Err(e) => Err(format!("cannot run go build: {e}")),
    }
}
