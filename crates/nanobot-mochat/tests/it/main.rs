//! The Mochat channel against a real Socket.IO server (python-socketio on aiohttp, from the peers' venv) that
//! plays Mochat's events and serves its claw HTTP API (`mochat_server.py`).

mod e2e;
