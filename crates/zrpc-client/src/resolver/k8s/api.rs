//! Where the Kubernetes API is and how to authenticate: in-cluster config, a kubeconfig, or
//! given explicitly; and one HTTP/1.1 GET to it (plain HTTP or TLS with the configured CA).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::{Request, Response, Uri};
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

use crate::Error;

/// The service-account files mounted in every pod.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Bound of a TCP connect plus the TLS handshake plus the response headers.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach the Kubernetes API: its address, the CA that signs its certificate, and the
/// credentials (a bearer token, read again on every request when it comes from a file, since
/// projected service-account tokens rotate; or a client certificate).
///
/// # Examples
///
/// ```no_run
/// use zrpc_client::resolver::k8s::KubeApi;
///
/// // In a pod: the service-account token and CA, KUBERNETES_SERVICE_HOST/PORT.
/// let api = KubeApi::in_cluster()?;
/// // On a laptop: $KUBECONFIG or ~/.kube/config, current context.
/// let api = KubeApi::from_kubeconfig(None)?;
/// // A local dev server without TLS.
/// let api = KubeApi::new("http://127.0.0.1:8001")?.with_token("t0ken");
/// # Ok::<(), zrpc_client::Error>(())
/// ```
#[derive(Clone)]
pub struct KubeApi {
    server: String,
    https: bool,
    host: String,
    port: u16,
    token: Token,
    ca: Vec<CertificateDer<'static>>,
    identity: Option<Arc<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>>,
}

#[derive(Debug, Clone)]
enum Token {
    None,
    Static(String),
    File(PathBuf),
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the token or key
        f.debug_struct("KubeApi")
            .field("server", &self.server)
            .field("ca_certs", &self.ca.len())
            .field("client_cert", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

fn config_error(source: &str, reason: impl Into<String>) -> Error {
    Error::Resolve {
        target: format!("k8s (Kubernetes API config from {source})"),
        reason: reason.into(),
    }
}

impl KubeApi {
    /// The API at `server` (`https://host:port` or, for development, `http://host:port`), with
    /// no credentials and no CA yet.
    ///
    /// # Errors
    ///
    /// [`Error::Resolve`] when `server` is not an `http(s)://host[:port]` URL.
    pub fn new(server: &str) -> Result<KubeApi, Error> {
        let bad = |why: &str| config_error("the server URL", format!("server {server:?}: {why}"));
        let uri: Uri = server
            .parse()
            .map_err(|e| bad(&format!("not a URL ({e})")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("expected http:// or https://")),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad("a path prefix is not supported"));
        }
        Ok(KubeApi {
            server: format!(
                "{}://{}",
                uri.scheme_str().unwrap_or("https"),
                uri.authority().map_or("", |a| a.as_str())
            ),
            https,
            host,
            port,
            token: Token::None,
            ca: Vec::new(),
            identity: None,
        })
    }

    /// Sends `Authorization: Bearer <token>` (default: no token).
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> KubeApi {
        self.token = Token::Static(token.into());
        self
    }

    /// Reads the bearer token from `path` on every request (rotated tokens are picked up).
    #[must_use]
    pub fn with_token_file(mut self, path: impl Into<PathBuf>) -> KubeApi {
        self.token = Token::File(path.into());
        self
    }

    /// Trusts the PEM CA certificates in `pem` for an `https://` server (required for https).
    ///
    /// # Errors
    ///
    /// [`Error::Resolve`] when `pem` holds no certificate.
    pub fn with_ca_pem(mut self, pem: &[u8]) -> Result<KubeApi, Error> {
        self.ca = parse_certs(pem).map_err(|e| config_error("the CA", e))?;
        Ok(self)
    }

    /// The config of a pod: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the
    /// service-account token and CA under `/var/run/secrets/kubernetes.io/serviceaccount/`.
    ///
    /// # Errors
    ///
    /// [`Error::Resolve`] naming the missing variable or unreadable file.
    pub fn in_cluster() -> Result<KubeApi, Error> {
        let src = "in-cluster (service account)";
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| config_error(src, format!("{name} is not set (not in a pod?)")))
        };
        let host = var("KUBERNETES_SERVICE_HOST")?;
        let port = var("KUBERNETES_SERVICE_PORT")?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let ca_path = Path::new(SA_DIR).join("ca.crt");
        let ca = std::fs::read(&ca_path)
            .map_err(|e| config_error(src, format!("cannot read {}: {e}", ca_path.display())))?;
        let token = Path::new(SA_DIR).join("token");
        std::fs::metadata(&token)
            .map_err(|e| config_error(src, format!("cannot read {}: {e}", token.display())))?;
        KubeApi::new(&format!("https://{host}:{port}"))?
            .with_ca_pem(&ca)
            .map_err(|e| config_error(src, format!("{}: {e}", ca_path.display())))
            .map(|api| api.with_token_file(token))
    }

    /// The current context of a kubeconfig: `path`, else the first file of `$KUBECONFIG`, else
    /// `~/.kube/config`. Supports `certificate-authority(-data)`, `token`, `tokenFile` and
    /// `client-certificate(-data)`/`client-key(-data)`; exec and auth-provider plugins are not
    /// supported (an error says so).
    ///
    /// # Errors
    ///
    /// [`Error::Resolve`] naming the file and the entry that is missing or wrong.
    pub fn from_kubeconfig(path: Option<&Path>) -> Result<KubeApi, Error> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => default_kubeconfig().ok_or_else(|| {
                config_error("kubeconfig", "KUBECONFIG is not set and HOME is unknown")
            })?,
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| config_error(&path.display().to_string(), format!("cannot read: {e}")))?;
        kubeconfig::load(&text, &path)
    }

    /// In a pod ([`KUBERNETES_SERVICE_HOST`](KubeApi::in_cluster) set) the in-cluster config,
    /// else the kubeconfig ([`KubeApi::from_kubeconfig`]).
    ///
    /// # Errors
    ///
    /// As [`KubeApi::in_cluster`] or [`KubeApi::from_kubeconfig`].
    pub fn infer() -> Result<KubeApi, Error> {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            KubeApi::in_cluster()
        } else {
            KubeApi::from_kubeconfig(None).map_err(|e| match e {
                Error::Resolve { target, reason } => Error::Resolve {
                    target,
                    reason: format!(
                        "{reason} (and KUBERNETES_SERVICE_HOST is not set, so this is not a pod)"
                    ),
                },
                e => e,
            })
        }
    }

    /// The API server URL (`https://host:port`).
    #[must_use]
    pub fn server(&self) -> &str {
        &self.server
    }

    fn with_identity(mut self, cert: &[u8], key: &[u8]) -> Result<KubeApi, String> {
        let certs = parse_certs(cert)?;
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| format!("no usable PEM private key: {e}"))?;
        self.identity = Some(Arc::new((certs, key)));
        Ok(self)
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, String> {
        if self.ca.is_empty() {
            return Err(format!(
                "no CA certificate for {} (give certificate-authority in the kubeconfig)",
                self.server
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        for c in &self.ca {
            roots
                .add(c.clone())
                .map_err(|e| format!("bad CA certificate: {e}"))?;
        }
        let identity = self
            .identity
            .as_ref()
            .map(|id| (id.0.clone(), id.1.clone_key()));
        crate::tls::client_config(roots, identity, b"http/1.1").map_err(|e| match self.identity {
            Some(_) => format!("bad client certificate or key: {e}"),
            None => e.to_string(),
        })
    }

    fn bearer(&self) -> Result<Option<String>, String> {
        match &self.token {
            Token::None => Ok(None),
            Token::Static(t) => Ok(Some(t.clone())),
            Token::File(p) => std::fs::read_to_string(p)
                .map(|t| Some(t.trim().to_owned()))
                .map_err(|e| format!("cannot read the token file {}: {e}", p.display())),
        }
    }

    /// One GET of `path_and_query`, on a new connection; the response once its headers arrived.
    pub(crate) async fn get(&self, path_and_query: &str) -> Result<Response<Incoming>, String> {
        let fut = self.get_inner(path_and_query);
        tokio::time::timeout(CONNECT_TIMEOUT, fut)
            .await
            .map_err(|_| format!("no response within {CONNECT_TIMEOUT:?}"))?
    }

    async fn get_inner(&self, path_and_query: &str) -> Result<Response<Incoming>, String> {
        let mut req = Request::get(path_and_query)
            .header(
                http::header::HOST,
                self.server.split("://").nth(1).unwrap_or(""),
            )
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "zrpc-k8s-resolver");
        if let Some(token) = self.bearer()? {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("bad request: {e}"))?;
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        if self.https {
            let config = self.tls_config()?;
            let name = ServerName::try_from(self.host.clone())
                .map_err(|e| format!("bad server name {:?}: {e}", self.host))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            send(TokioIo::new(tls), req).await
        } else {
            send(TokioIo::new(tcp), req).await
        }
    }
}

async fn send<IO>(io: IO, req: Request<Empty<Bytes>>) -> Result<Response<Incoming>, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    // The connection ends when the response body is dropped (or read to its end).
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))
}

fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM CERTIFICATE block".into());
    }
    Ok(certs)
}

fn default_kubeconfig() -> Option<PathBuf> {
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return std::env::split_paths(&list).next();
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube").join("config"))
}

/// The kubeconfig subset read here.
mod kubeconfig {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct File {
        #[serde(default)]
        current_context: String,
        #[serde(default)]
        contexts: Vec<Named<Context>>,
        #[serde(default)]
        clusters: Vec<Named<Cluster>>,
        #[serde(default)]
        users: Vec<Named<User>>,
    }

    #[derive(Deserialize)]
    struct Named<T> {
        name: String,
        #[serde(alias = "context", alias = "cluster", alias = "user")]
        value: T,
    }

    #[derive(Deserialize)]
    struct Context {
        cluster: String,
        #[serde(default)]
        user: String,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Cluster {
        server: String,
        certificate_authority: Option<String>,
        certificate_authority_data: Option<String>,
        #[serde(default)]
        insecure_skip_tls_verify: bool,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct User {
        token: Option<String>,
        #[serde(rename = "tokenFile")]
        token_file: Option<String>,
        client_certificate: Option<String>,
        client_certificate_data: Option<String>,
        client_key: Option<String>,
        client_key_data: Option<String>,
        exec: Option<serde_yaml_ng::Value>,
        auth_provider: Option<serde_yaml_ng::Value>,
    }

    pub(super) fn load(text: &str, path: &Path) -> Result<KubeApi, Error> {
        let src = path.display().to_string();
        let err = |why: String| config_error(&src, why);
        let file: File =
            serde_yaml_ng::from_str(text).map_err(|e| err(format!("not a kubeconfig: {e}")))?;
        if file.current_context.is_empty() {
            return Err(err("no current-context".into()));
        }
        let ctx = find(&file.contexts, &file.current_context)
            .ok_or_else(|| err(format!("context {:?} not found", file.current_context)))?;
        let cluster = find(&file.clusters, &ctx.cluster).ok_or_else(|| {
            err(format!(
                "cluster {:?} of context {:?} not found",
                ctx.cluster, file.current_context
            ))
        })?;
        let at = |what: &str| format!("cluster {:?}: {what}", ctx.cluster);
        if cluster.insecure_skip_tls_verify {
            return Err(err(at(
                "insecure-skip-tls-verify is not supported: give certificate-authority",
            )));
        }
        let mut api = KubeApi::new(&cluster.server).map_err(|e| err(at(&e.to_string())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let ca = read_either(
            base,
            cluster.certificate_authority.as_deref(),
            cluster.certificate_authority_data.as_deref(),
        )
        .map_err(|e| err(at(&format!("certificate-authority: {e}"))))?;
        if let Some(ca) = ca {
            api.ca =
                parse_certs(&ca).map_err(|e| err(at(&format!("certificate-authority: {e}"))))?;
        }
        if ctx.user.is_empty() {
            return Ok(api);
        }
        let user = find(&file.users, &ctx.user)
            .ok_or_else(|| err(format!("user {:?} not found", ctx.user)))?;
        let at = |what: &str| format!("user {:?}: {what}", ctx.user);
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(err(at(
                "exec and auth-provider credential plugins are not supported: \
                 use a token, tokenFile or a client certificate",
            )));
        }
        if let Some(t) = &user.token {
            api = api.with_token(t.clone());
        } else if let Some(f) = &user.token_file {
            api = api.with_token_file(base.join(f));
        }
        let cert = read_either(
            base,
            user.client_certificate.as_deref(),
            user.client_certificate_data.as_deref(),
        )
        .map_err(|e| err(at(&format!("client-certificate: {e}"))))?;
        let key = read_either(
            base,
            user.client_key.as_deref(),
            user.client_key_data.as_deref(),
        )
        .map_err(|e| err(at(&format!("client-key: {e}"))))?;
        match (cert, key) {
            (Some(c), Some(k)) => api.with_identity(&c, &k).map_err(|e| err(at(&e))),
            (None, None) => Ok(api),
            _ => Err(err(at("client-certificate and client-key go together"))),
        }
    }

    fn find<'a, T>(list: &'a [Named<T>], name: &str) -> Option<&'a T> {
        list.iter().find(|n| n.name == name).map(|n| &n.value)
    }

    /// A file (relative to the kubeconfig's directory) or inline base64 data.
    fn read_either(
        base: &Path,
        file: Option<&str>,
        data: Option<&str>,
    ) -> Result<Option<Vec<u8>>, String> {
        if let Some(d) = data.filter(|d| !d.is_empty()) {
            return base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(Some)
                .map_err(|e| format!("bad base64 data: {e}"));
        }
        match file.filter(|f| !f.is_empty()) {
            Some(f) => {
                let p = base.join(f);
                std::fs::read(&p)
                    .map(Some)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<KubeApi, String> {
        kubeconfig::load(text, Path::new("/nonexistent/kubeconfig")).map_err(|e| e.to_string())
    }

    const CONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: local, user: me, namespace: prod}
clusters:
- name: local
  cluster: {server: "http://127.0.0.1:8001"}
users:
- name: me
  user: {token: s3cret}
"#;

    #[test]
    fn kubeconfig_current_context() {
        let api = load(CONFIG).unwrap();
        assert_eq!(api.server(), "http://127.0.0.1:8001");
        assert_eq!(api.bearer().unwrap().as_deref(), Some("s3cret"));
        assert!(
            !format!("{api:?}").contains("s3cret"),
            "Debug hides the token"
        );
    }

    #[test]
    fn kubeconfig_errors_name_the_entry() {
        let e = load(&CONFIG.replace("current-context: dev", "current-context: nope")).unwrap_err();
        assert!(
            e.contains("/nonexistent/kubeconfig") && e.contains("context \"nope\" not found"),
            "{e}"
        );
        let e = load(&CONFIG.replace("{token: s3cret}", "{exec: {command: aws}}")).unwrap_err();
        assert!(e.contains("user \"me\"") && e.contains("exec"), "{e}");
        let e = load(&CONFIG.replace(
            "http://127.0.0.1:8001",
            "https://k:6443\", certificate-authority: ca.pem, x: \"",
        ))
        .unwrap_err();
        assert!(
            e.contains("cluster \"local\": certificate-authority: cannot read /nonexistent/ca.pem"),
            "{e}"
        );
        let e = load(&CONFIG.replace("http://127.0.0.1:8001", "ftp://k")).unwrap_err();
        assert!(e.contains("expected http:// or https://"), "{e}");
        let e = load("{}").unwrap_err();
        assert!(e.contains("no current-context"), "{e}");
    }

    #[test]
    fn https_needs_a_ca() {
        let api = KubeApi::new("https://10.0.0.1:6443").unwrap();
        assert!(
            api.tls_config()
                .unwrap_err()
                .contains("no CA certificate for https://10.0.0.1:6443")
        );
        assert!(
            KubeApi::new("https://h")
                .unwrap()
                .with_ca_pem(b"junk")
                .is_err()
        );
    }
}
