#!/usr/bin/env bash
# Makes a local CA, a server certificate for 127.0.0.1/localhost and a client certificate
# (CN greeter-client) for examples/etc/greeter-{server,client}-tls.yaml. Development only:
# the CA key stays next to the certificates.
#
#   scripts/make-dev-certs.sh [out-dir]     (default examples/etc/certs)
set -euo pipefail

out="${1:-examples/etc/certs}"
days="${DAYS:-825}"
mkdir -p "$out"
cd "$out"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 3650 -subj "/CN=zrpc dev CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

leaf() { # name cn sans eku
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$4" "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

leaf server greeter-server "DNS:localhost,IP:127.0.0.1,IP:::1" serverAuth
leaf client greeter-client "DNS:greeter-client,URI:spiffe://zrpc.dev/greeter-client" clientAuth
chmod 600 ./*.key
echo "wrote $(pwd)/{ca,server,client}.{pem,key}"
