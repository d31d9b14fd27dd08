#!/usr/bin/env bash
# Test certificates for TLS: mkcerts.sh OUTDIR
#   ca.pem                    test CA
#   server.pem/.key           the secondary's (TLS server): extendedKeyUsage
#                             serverAuth, SAN IP:127.0.0.1 + DNS:localhost +
#                             DNS:understudy-secondary, signed by ca
#   client.pem/.key           the primary's (TLS client): extendedKeyUsage
#                             clientAuth, SAN DNS:understudy-primary, signed by ca
#   hosta.pem, hostb.pem      both roles (serverAuth,clientAuth), SAN as server:
#                             the two hosts of a pair that switches over
#   other-ca.pem, other.pem/.key   an unrelated CA and a cert it signed (both usages)
#   expired.pem/.key          signed by ca, both usages, validity entirely in the past
#   noeku.pem/.key            signed by ca, no extended key usage: refused in either role
# A role is the extendedKeyUsage extension of the leaf: the secondary accepts
# only a clientAuth certificate from its primary, the primary only a
# serverAuth one from its secondary (net/tls.c). To make one by hand:
#   openssl x509 -req -in X.csr -CA ca.pem -CAkey ca.key -days 825 -extfile <(printf \
#     'extendedKeyUsage=serverAuth\nsubjectAltName=DNS:HOST\nbasicConstraints=CA:FALSE\n')
# (clientAuth for a primary). --tls-peer-name NAME checks a SAN DNS name too.
# Uses only the openssl CLI (openssl ca with explicit past -startdate/-enddate).
set -euo pipefail
out=${1:?usage: mkcerts.sh OUTDIR}
mkdir -p "$out"
cd "$out"
san="subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:understudy-secondary"
both="extendedKeyUsage=serverAuth,clientAuth"

mkca() {   # name subject
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=$2" -keyout "$1.key" -out "$1.pem" 2>/dev/null
}
mkleaf() {   # name ca subject extensions (one per line)
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$3" \
		-keyout "$1.key" -out "$1.csr" 2>/dev/null
	openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 825 \
		-extfile <(printf '%s\nbasicConstraints=CA:FALSE\n' "$4") -out "$1.pem" 2>/dev/null
	rm -f "$1.csr"
}

mkca ca "understudy test CA"
mkca other-ca "unrelated CA"
mkleaf server ca 127.0.0.1 "extendedKeyUsage=serverAuth
$san"
mkleaf client ca "understudy primary" "extendedKeyUsage=clientAuth
subjectAltName=DNS:understudy-primary"
mkleaf other other-ca 127.0.0.1 "$both
$san"
mkleaf noeku ca 127.0.0.1 "$san"
# Hosts of a pair that swaps roles (switchover): each is a TLS server and a
# TLS client in turn, so each certificate carries both roles.
mkleaf hosta ca "understudy host a" "$both
$san"
mkleaf hostb ca "understudy host b" "$both
$san"

# Expired: openssl ca lets us set both dates in the past.
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
	-keyout expired.key -out expired.csr 2>/dev/null
mkdir -p cadb && : > cadb/index.txt && echo 1000 > cadb/serial
cat > cadb/ca.cnf <<CNF
[ ca ]
default_ca = test
[ test ]
dir = cadb
database = cadb/index.txt
serial = cadb/serial
new_certs_dir = cadb
certificate = ca.pem
private_key = ca.key
default_md = sha256
policy = any
copy_extensions = none
[ any ]
commonName = supplied
[ ext ]
$san
$both
basicConstraints=CA:FALSE
CNF
openssl ca -batch -config cadb/ca.cnf -extensions ext -in expired.csr -out expired.pem \
	-startdate 20200101000000Z -enddate 20210101000000Z -notext 2>/dev/null
rm -rf expired.csr cadb ./*.srl
echo "certificates in $out"
