//! Certificates for the TLS tests, made with the `openssl` CLI (as the etcd TLS helper does):
//! a CA, and leaf certificates it signs with chosen SANs, valid or already expired. EC P-256
//! keys in PKCS#8.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8).
    pub key: PathBuf,
}

impl CertFiles {
    /// The certificate path as a string (config values are strings).
    pub fn cert_str(&self) -> String {
        self.cert.display().to_string()
    }

    /// The key path as a string.
    pub fn key_str(&self) -> String {
        self.key.display().to_string()
    }
}

/// A test CA in its own temporary directory.
#[derive(Debug)]
pub struct TestCa {
    dir: tempfile::TempDir,
    /// The CA certificate and key.
    pub files: CertFiles,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run openssl (needed for the TLS tests): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestCa {
    /// A new self-signed CA named `name`.
    ///
    /// # Panics
    /// When `openssl` fails.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().expect("temp dir");
        let subj = format!("/CN={name}");
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "3650",
                "-subj",
                &subj,
            ],
        );
        let files = CertFiles {
            cert: dir.path().join("ca.pem"),
            key: dir.path().join("ca.key"),
        };
        TestCa { dir, files }
    }

    /// The CA's directory (scratch space for tests).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A leaf certificate with subject CN `cn` and SANs `sans` (`DNS:localhost`,
    /// `IP:127.0.0.1`, `URI:spiffe://x/y`), for server and client auth, valid for a year.
    pub fn issue(&self, cn: &str, sans: &[&str]) -> CertFiles {
        self.issue_days(cn, sans, 365)
    }

    /// A leaf certificate that expires the second it is made (`-days 0`); wait a second
    /// before using it.
    pub fn issue_expired(&self, cn: &str, sans: &[&str]) -> CertFiles {
        self.issue_days(cn, sans, 0)
    }

    fn issue_days(&self, cn: &str, sans: &[&str], days: u32) -> CertFiles {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.path();
        let (key, csr, cert, ext) = (
            format!("leaf{n}.key"),
            format!("leaf{n}.csr"),
            format!("leaf{n}.pem"),
            format!("leaf{n}.ext"),
        );
        let mut ext_text = String::from(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        if !sans.is_empty() {
            ext_text.push_str(&format!("subjectAltName={}\n", sans.join(",")));
        }
        std::fs::write(dir.join(&ext), ext_text).expect("write ext file");
        let subj = format!("/CN={cn}");
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &subj,
            ],
        );
        let days = days.to_string();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                &days,
                "-extfile",
                &ext,
                "-out",
                &cert,
            ],
        );
        CertFiles {
            cert: dir.join(cert),
            key: dir.join(key),
        }
    }
}
