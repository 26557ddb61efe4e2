//! [`PeerIdentity`]: who the client is, from its TLS certificate.
//!
//! The subject CN and the SAN DNS names, URIs and IP addresses are read from the leaf
//! certificate with a minimal DER walk (the certificate was already verified by rustls
//! against `Tls.ClientCaFile`; a field that cannot be read is left out).
//!
//! Without the `tls` feature no connection carries a certificate and nothing builds a
//! `PeerIdentity`; the type stays (public API, read from request extensions) without
//! `certificates()`, and its DER walk is unused.
#![cfg_attr(not(feature = "tls"), allow(dead_code))]

use std::net::IpAddr;
use std::sync::Arc;

#[cfg(feature = "tls")]
use rustls::pki_types::CertificateDer;

/// The verified client certificate of an mTLS connection, in every request's extensions.
///
/// Present only on TLS connections whose client sent a certificate (`Tls.ClientCaFile` set;
/// the `tls` cargo feature).
///
/// # Examples
///
/// ```
/// use zrpc_server::PeerIdentity; // zrpc::PeerIdentity through the facade
///
/// fn caller(req: &tonic::Request<()>) -> Option<String> {
///     let id = req.extensions().get::<PeerIdentity>()?;
///     id.common_name().map(str::to_owned)
/// }
/// # let _ = caller;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    inner: Arc<Inner>,
}

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    common_name: Option<String>,
    dns_names: Vec<String>,
    uris: Vec<String>,
    ip_addresses: Vec<IpAddr>,
    #[cfg(feature = "tls")]
    chain: Vec<CertificateDer<'static>>,
}

impl PeerIdentity {
    /// Reads the leaf (first) certificate of `chain`; `None` for an empty chain.
    #[cfg(feature = "tls")]
    pub(crate) fn from_chain(chain: Vec<CertificateDer<'static>>) -> Option<PeerIdentity> {
        let leaf = chain.first()?;
        let mut inner = Inner {
            common_name: None,
            dns_names: Vec::new(),
            uris: Vec::new(),
            ip_addresses: Vec::new(),
            chain: Vec::new(),
        };
        parse_leaf(leaf.as_ref(), &mut inner);
        inner.chain = chain;
        Some(PeerIdentity {
            inner: Arc::new(inner),
        })
    }

    /// The subject's common name (CN), if any.
    pub fn common_name(&self) -> Option<&str> {
        self.inner.common_name.as_deref()
    }

    /// The SAN DNS names.
    pub fn dns_names(&self) -> &[String] {
        &self.inner.dns_names
    }

    /// The SAN URIs (SPIFFE IDs, for example).
    pub fn uris(&self) -> &[String] {
        &self.inner.uris
    }

    /// The SAN IP addresses.
    pub fn ip_addresses(&self) -> &[IpAddr] {
        &self.inner.ip_addresses
    }

    /// The certificate chain the client sent, leaf first (DER).
    #[cfg(feature = "tls")]
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.inner.chain
    }

    /// True when `name` is the subject CN, a SAN DNS name or a SAN URI (exact match, as
    /// `Tls.AllowedClients` checks).
    pub fn matches(&self, name: &str) -> bool {
        self.common_name() == Some(name)
            || self.inner.dns_names.iter().any(|n| n == name)
            || self.inner.uris.iter().any(|n| n == name)
    }

    /// A short description for errors and logs: `CN=a, DNS=b, URI=c`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(cn) = self.common_name() {
            parts.push(format!("CN={cn}"));
        }
        parts.extend(self.inner.dns_names.iter().map(|n| format!("DNS={n}")));
        parts.extend(self.inner.uris.iter().map(|n| format!("URI={n}")));
        parts.extend(self.inner.ip_addresses.iter().map(|n| format!("IP={n}")));
        if parts.is_empty() {
            "no CN or SAN".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// One DER TLV at a time.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&l0, mut rest) = rest.split_first()?;
        let len = if l0 < 0x80 {
            usize::from(l0)
        } else {
            let n = usize::from(l0 & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let (len_bytes, r) = rest.split_at(n);
            rest = r;
            len_bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
        };
        if rest.len() < len {
            return None;
        }
        let (value, r) = rest.split_at(len);
        self.0 = r;
        Some((tag, value))
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// 2.5.4.3
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];

fn parse_leaf(der: &[u8], out: &mut Inner) -> Option<()> {
    let (_, cert) = Der(der).next().filter(|(t, _)| *t == SEQUENCE)?;
    let (_, tbs) = Der(cert).next().filter(|(t, _)| *t == SEQUENCE)?;
    let mut tbs = Der(tbs);
    if tbs.next()?.0 == 0xa0 {
        let _serial = tbs.next()?; // after the version
    }
    let _sig_alg = tbs.next()?;
    let _issuer = tbs.next()?;
    let _validity = tbs.next()?;
    let (_, subject) = tbs.next()?;
    parse_subject(subject, out);
    let _spki = tbs.next()?;
    while let Some((tag, value)) = tbs.next() {
        if tag == 0xa3 {
            parse_extensions(value, out);
        }
    }
    Some(())
}

fn parse_subject(subject: &[u8], out: &mut Inner) {
    let mut rdns = Der(subject);
    while let Some((SET, rdn)) = rdns.next() {
        let mut atvs = Der(rdn);
        while let Some((SEQUENCE, atv)) = atvs.next() {
            let mut atv = Der(atv);
            if let (Some((OID, oid)), Some((_, value))) = (atv.next(), atv.next())
                && oid == OID_CN
            {
                out.common_name = Some(String::from_utf8_lossy(value).into_owned());
            }
        }
    }
}

fn parse_extensions(wrapped: &[u8], out: &mut Inner) -> Option<()> {
    let (_, exts) = Der(wrapped).next().filter(|(t, _)| *t == SEQUENCE)?;
    let mut exts = Der(exts);
    while let Some((SEQUENCE, ext)) = exts.next() {
        let mut ext = Der(ext);
        let Some((OID, oid)) = ext.next() else {
            continue;
        };
        if oid != OID_SAN {
            continue;
        }
        let mut value = ext.next()?;
        if value.0 == 0x01 {
            value = ext.next()?; // critical
        }
        let (_, names) = Der(value.1).next().filter(|(t, _)| *t == SEQUENCE)?;
        let mut names = Der(names);
        while let Some((tag, name)) = names.next() {
            match tag {
                0x82 => out
                    .dns_names
                    .push(String::from_utf8_lossy(name).into_owned()),
                0x86 => out.uris.push(String::from_utf8_lossy(name).into_owned()),
                0x87 => {
                    if let Ok(v4) = <[u8; 4]>::try_from(name) {
                        out.ip_addresses.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(name) {
                        out.ip_addresses.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    Some(())
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use rustls::pki_types::pem::PemObject;

    use super::*;

    /// `O=zrpc, CN=svc-a`; SANs DNS a.example, b.example, URI spiffe://t/x, IP 10.0.0.7, ::1
    /// (made with openssl, valid until 2126).
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBzDCCAXGgAwIBAgIUWfd2pIv4YWj9ny2/QLpJYWTXlxYwCgYIKoZIzj0EAwIw\nEjEQMA4GA1UEAwwHdGVzdCBDQTAgFw0yNjExMzAwNjI2MTlaGA8yMTI2MTEwNjA2\nMjYxOVowHzENMAsGA1UECgwEenJwYzEOMAwGA1UEAwwFc3ZjLWEwWTATBgcqhkjO\nPQIBBggqhkjOPQMBBwNCAATVkZ3B7Wn6PyAdjQnaydknVnu970HvbkCRiIoil728\nxUbWTKf4wcLUkCnsRUgwoc5vr5wYNI9uhMvOaMVehOqfo4GVMIGSMEUGA1UdEQQ+\nMDyCCWEuZXhhbXBsZYIJYi5leGFtcGxlhgxzcGlmZmU6Ly90L3iHBAoAAAeHEAAA\nAAAAAAAAAAAAAAAAAAEwCQYDVR0TBAIwADAdBgNVHQ4EFgQUnawN8laGW8Zgxhs0\n1Bo2DUI24MowHwYDVR0jBBgwFoAUDaHWEOwBXK1sFqryBPjslJf9wp0wCgYIKoZI\nzj0EAwIDSQAwRgIhAPTbMD5JT7kjg5XA6OHRAsB40rbY/xih563c+2wHKOuYAiEA\n9wOQ11vDNAXehe6acB1te6iCJAACPqWeCZbKanqSUs8=\n-----END CERTIFICATE-----";

    #[test]
    fn reads_common_name_and_sans() {
        let der = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        let id = PeerIdentity::from_chain(vec![der]).unwrap();
        assert_eq!(id.common_name(), Some("svc-a"));
        assert_eq!(id.dns_names(), ["a.example", "b.example"]);
        assert_eq!(id.uris(), ["spiffe://t/x"]);
        assert_eq!(
            id.ip_addresses(),
            [
                "10.0.0.7".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(id.matches("svc-a") && id.matches("b.example") && id.matches("spiffe://t/x"));
        assert!(!id.matches("zrpc") && !id.matches("10.0.0.7"));
        assert_eq!(
            id.describe(),
            "CN=svc-a, DNS=a.example, DNS=b.example, URI=spiffe://t/x, IP=10.0.0.7, IP=::1"
        );
    }

    #[test]
    fn garbage_gives_an_empty_identity_not_a_panic() {
        for bytes in [
            &b""[..],
            &[0x30, 0x82, 0xff],
            &[0x30, 0x03, 0x30, 0x01, 0x02],
        ] {
            let id = PeerIdentity::from_chain(vec![CertificateDer::from(bytes.to_vec())]).unwrap();
            assert_eq!(id.common_name(), None);
            assert_eq!(id.describe(), "no CN or SAN");
        }
        assert!(PeerIdentity::from_chain(Vec::new()).is_none());
    }
}
