"""The gRPC front's certificate chain: what the remoting listener sends (its OpenSSL completes a
one-certificate file from the trust store), not the file alone, so that a client trusting only the root
verifies a certificate an intermediate CA issued."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509

from daemon.grpc.server import issuers
from daemon.remoting.tls import cert_pem, make_certificate, new_key


def test_the_chain_is_completed_from_the_trust_file_up_to_the_root(tmp_path: Path) -> None:
    root_key, mid_key, leaf_key = new_key(), new_key(), new_key()
    root = make_certificate(root_key, "root", issuer=None, sans=[], ca=True)
    mid = make_certificate(mid_key, "intermediate", issuer=(root, root_key), sans=[], ca=True)
    leaf = make_certificate(leaf_key, "broker", issuer=(mid, mid_key), sans=["127.0.0.1"], ca=False)
    trust = tmp_path / "trust.pem"
    trust.write_bytes(cert_pem(root) + cert_pem(mid))
    added = x509.load_pem_x509_certificates(issuers(cert_pem(leaf), str(trust)))
    assert [c.subject for c in added] == [mid.subject, root.subject]
    # a file that holds its chain already gets nothing twice; no trust file, nothing to add
    assert x509.load_pem_x509_certificates(issuers(cert_pem(leaf) + cert_pem(mid), str(trust))) == [root]
    assert issuers(cert_pem(root), str(trust)) == b"" and issuers(cert_pem(leaf), "") == b""
