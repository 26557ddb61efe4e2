//! PEM files to rustls types; every error names the config key and the file.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::TlsError;

pub(crate) fn read(key: &'static str, file: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(file).map_err(|source| TlsError::Read {
        key,
        file: file.to_owned(),
        source,
    })
}

/// The PEM certificates of `file` (at least one).
pub(crate) fn load_certs(
    key: &'static str,
    file: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certs_from_pem(key, file, &read(key, file)?)
}

fn certs_from_pem(
    key: &'static str,
    file: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            key,
            file: file.to_owned(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            key,
            file: file.to_owned(),
            reason: "no PEM CERTIFICATE block".to_owned(),
        });
    }
    Ok(certs)
}

/// The CA certificates in `pem` (the bytes of `file`) as trust anchors.
pub(crate) fn roots_from_pem(
    key: &'static str,
    file: &str,
    pem: &[u8],
) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(key, file, pem)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            key,
            file: file.to_owned(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// The private key of `file`.
pub(crate) fn load_key(key: &'static str, file: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(key, file)?).map_err(|e| TlsError::Pem {
        key,
        file: file.to_owned(),
        reason: format!("no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
    })
}

/// The certificate chain and key of the server, checked to belong together.
pub(crate) fn load_certified_key(
    cert_file: &str,
    key_file: &str,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = load_certs("Tls.CertFile", cert_file)?;
    let key = load_key("Tls.KeyFile", key_file)?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::Pem {
            key: "Tls.KeyFile",
            file: key_file.to_owned(),
            reason: format!("unsupported private key: {e}"),
        })?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert_file: cert_file.to_owned(),
                key_file: key_file.to_owned(),
            })
        }
        _ => Ok(Arc::new(certified)),
    }
}
