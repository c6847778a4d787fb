"""A real SMTP server (aiosmtpd) for the e-mail channel's tests.

STARTTLS is required before AUTH; logins are checked against a users file ("address:password" lines). Each
accepted message is delivered into the recipient's Maildir (<maildir-root>/<local part>/), which Dovecot serves
over IMAP.
"""

import argparse
import mailbox
import os
import ssl
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--users", required=True)
    ap.add_argument("--maildirs", required=True)
    ap.add_argument("--owner", default="", help="uid:gid to give delivered files (when run as root)")
    args = ap.parse_args()

    users = {}
    with open(args.users, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                address, _, password = line.partition(":")
                users[address.lower()] = password

    def authenticate(server, session, envelope, mechanism, auth_data):
        if isinstance(auth_data, LoginPassword):
            login = auth_data.login.decode("utf-8", "replace").lower()
            if users.get(login) == auth_data.password.decode("utf-8", "replace"):
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    class Deliver:
        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if address.lower() not in users:
                return "550 5.1.1 no such user here"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):
            data = envelope.original_content or envelope.content
            if isinstance(data, str):
                data = data.encode("utf-8")
            trace = f"Return-Path: <{envelope.mail_from}>\r\n".encode("ascii", "replace")
            for rcpt in envelope.rcpt_tos:
                local = rcpt.split("@", 1)[0].lower()
                box = mailbox.Maildir(os.path.join(args.maildirs, local), create=True)
                key = box.add(trace + data)
                if args.owner:
                    uid, gid = (int(x) for x in args.owner.split(":"))
                    os.chown(os.path.join(box._path, "new", key), uid, gid)
            return "250 2.0.0 delivered"

    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(args.cert, args.key)
    controller = Controller(
        Deliver(),
        hostname="127.0.0.1",
        port=args.port,
        tls_context=tls,
        require_starttls=True,
        auth_require_tls=True,
        authenticator=authenticate,
        server_hostname="localhost",
        # A loaded CI machine can take longer than the default 5 s to start the server thread.
        ready_timeout=30.0,
    )
    controller.start()
    print("READY", flush=True)
    # The test harness's shell wrapper stops this process when the test process goes away.
    threading.Event().wait()


if __name__ == "__main__":
    main()
