#!/usr/bin/env bash
# Test certificates for TLS: mkcerts.sh OUTDIR
#   ca.pem                    test CA
#   server.pem/.key           CN/SAN 127.0.0.1 + localhost, signed by ca
#   client.pem/.key           client cert, signed by ca
#   other-ca.pem, other.pem/.key   an unrelated CA and a host cert it signed
#   expired.pem/.key          signed by ca, validity entirely in the past
# Uses only the openssl CLI (openssl ca with explicit past -startdate/-enddate).
set -euo pipefail
out=${1:?usage: mkcerts.sh OUTDIR}
mkdir -p "$out"
cd "$out"
san="subjectAltName=IP:127.0.0.1,DNS:localhost"

mkca() {   # name subject
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=$2" -keyout "$1.key" -out "$1.pem" 2>/dev/null
}
mkleaf() {   # name ca subject
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$3" \
		-keyout "$1.key" -out "$1.csr" 2>/dev/null
	openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 825 \
		-extfile <(printf '%s\nbasicConstraints=CA:FALSE\n' "$san") -out "$1.pem" 2>/dev/null
	rm -f "$1.csr"
}

mkca ca "understudy test CA"
mkca other-ca "unrelated CA"
mkleaf server ca 127.0.0.1
mkleaf client ca "understudy client"
mkleaf other other-ca 127.0.0.1

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
basicConstraints=CA:FALSE
CNF
openssl ca -batch -config cadb/ca.cnf -extensions ext -in expired.csr -out expired.pem \
	-startdate 20200101000000Z -enddate 20210101000000Z -notext 2>/dev/null
rm -rf expired.csr cadb ./*.srl
echo "certificates in $out"
