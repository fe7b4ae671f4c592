"""SCRAM (wire/scram.py) against RFC 7677's SCRAM-SHA-256 example, both sides against each other for SHA-512,
and the stored credential's text form (Kafka's /config/users layout)."""

from __future__ import annotations

import base64

import pytest

from ferry.wire.scram import ScramClient, ScramCredential, ScramError, ScramServer

# RFC 7677, section 3
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_server_side():
    cred = ScramCredential.create("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = ScramServer("SCRAM-SHA-256", server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.first(CLIENT_FIRST) == "user"
    assert server.server_first(cred) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL


def test_rfc7677_client_side():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


@pytest.mark.parametrize("password, ok", [("right", True), ("wrong", False)])
def test_sha512_both_sides(password, ok):
    cred = ScramCredential.create("SCRAM-SHA-512", "right")
    client, server = ScramClient("SCRAM-SHA-512", "a=b,c", password), ScramServer("SCRAM-SHA-512")
    assert server.first(client.first()) == "a=b,c"  # names escaped as =3D and =2C on the wire
    final = client.final(server.server_first(cred))
    if ok:
        client.verify(server.final(final))
    else:
        with pytest.raises(ScramError, match="authentication failed"):
            server.final(final)


def test_credential_text_and_plain_check():
    cred = ScramCredential.create("SCRAM-SHA-512", "pw", 8192)
    text = cred.encode()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert "pw" not in text.split(",iterations")[0].replace("salt=", "")  # never the password
    again = ScramCredential.decode(text)
    assert again == cred and again.matches("SCRAM-SHA-512", "pw") and not again.matches("SCRAM-SHA-512", "pW")
    with pytest.raises(ValueError):
        ScramCredential.decode("salt=AAAA")
    with pytest.raises(ValueError):
        ScramCredential.create("SCRAM-SHA-256", "pw", 100)


@pytest.mark.parametrize("message", [b"p=tls-unique,,n=u,r=x", b"n,,r=x", b"\xff\xfe", b"n,,n=u,r=x,m=ext"])
def test_malformed_client_first(message):
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-256").first(message)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_codec_round_trip(version):
    from ferry.wire.protocol import sasl_authenticate as sa
    from ferry.wire.protocol.primitives import Reader

    token = bytes(range(256)) * 3  # a length needing a two-byte varint in v2
    resp = sa.SaslAuthenticateResponse(58, "nope", token, 1234 if version else 0)
    assert sa.parse_response(Reader(sa.encode_response(version, resp)), version) == resp
    if version == 2:  # a request: header tags, compact bytes, body tags
        body = b"\x00" + bytes([(len(token) + 1) & 0x7F | 0x80, (len(token) + 1) >> 7]) + token + b"\x00"
        assert sa.parse_request(Reader(body), 2) == token
