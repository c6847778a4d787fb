"""A Mochat server for the channel's tests: a real Socket.IO server (python-socketio on aiohttp) playing Mochat's
events, and Mochat's claw HTTP API (send, sessions watch, panel messages, directories), plus /test/* controls.

Usage: mochat_server.py TOKEN websocket|polling. With "polling" the Socket.IO server refuses the WebSocket
transport (the channel must fall back to the HTTP API). Prints "READY <port>" when listening."""
import asyncio
import json
import sys

import socketio
from aiohttp import web

TOKEN = sys.argv[1]
MODE = sys.argv[2]
HISTORY = [{"seq": 1, "type": "message.add", "timestamp": "2026-11-23T00:00:00Z",
            "payload": {"messageId": "hist-1", "author": "alice", "content": "old message from history"}}]

sio = socketio.AsyncServer(async_mode="aiohttp",
                           transports=["websocket", "polling"] if MODE == "websocket" else ["polling"])
app = web.Application()
sio.attach(app, socketio_path="socket.io")
state = {"version": 0, "connects": 0, "connected": [], "subscribe_sessions": [], "subscribe_panels": [], "sent": [], "watch": 0}
queues = {}  # sessionId -> list of events for /api/claw/sessions/watch
changed = asyncio.Event()
state_changed = asyncio.Condition()


async def bump():
    async with state_changed:
        state["version"] += 1
        state_changed.notify_all()


@sio.event
async def connect(sid, environ, auth):
    if not isinstance(auth, dict) or auth.get("token") != TOKEN:
        raise socketio.exceptions.ConnectionRefusedError("invalid claw token")
    state["connects"] += 1
    state["connected"].append(sid)
    await bump()


@sio.event
async def disconnect(sid, reason=None):
    if sid in state["connected"]:
        state["connected"].remove(sid)


@sio.on("com.claw.im.subscribeSessions")
async def subscribe_sessions(sid, data):
    state["subscribe_sessions"].append(data)
    await bump()
    cursors = data.get("cursors") or {}
    sessions = [{"sessionId": s, "cursor": max(1, cursors.get(s, 0)),
                 "events": HISTORY if s not in cursors else []} for s in data.get("sessionIds", [])]
    return {"result": True, "data": {"sessions": sessions}}


@sio.on("com.claw.im.subscribePanels")
async def subscribe_panels(sid, data):
    state["subscribe_panels"].append(data)
    await bump()
    return {"result": True}


def authorised(request):
    return request.headers.get("X-Claw-Token") == TOKEN


def ok(data):
    return web.json_response({"code": 200, "data": data})


async def send(request):
    if not authorised(request):
        return web.json_response({"code": 401, "message": "bad token"}, status=401)
    body = await request.json()
    body["path"] = request.path
    state["sent"].append(body)
    await bump()
    return ok({"messageId": f"sent-{len(state['sent'])}"})


async def watch(request):
    if not authorised(request):
        return web.json_response({"code": 401, "message": "bad token"}, status=401)
    body = await request.json()
    state["watch"] += 1
    await bump()
    sid, cursor = body["sessionId"], int(body.get("cursor") or 0)
    if cursor == 0:
        return ok({"sessionId": sid, "cursor": 1, "events": HISTORY})
    deadline = asyncio.get_running_loop().time() + min(body.get("timeoutMs", 25000), 25000) / 1000
    while True:
        events = [e for e in queues.get(sid, []) if e["seq"] > cursor]
        left = deadline - asyncio.get_running_loop().time()
        if events or left <= 0:
            new_cursor = max([cursor] + [e["seq"] for e in events])
            return ok({"sessionId": sid, "cursor": new_cursor, "events": events})
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), left)
        except asyncio.TimeoutError:
            pass


async def panel_messages(request):
    return ok({"groupId": "g1", "messages": []})


async def sessions_list(request):
    return ok({"sessions": [{"sessionId": "session_1", "converseId": "conv_1"}]})


async def groups_get(request):
    return ok({"panels": [{"id": "panel_1", "type": 0}]})


async def test_emit(request):
    body = await request.json()
    await sio.emit(body["event"], body["data"])
    return web.json_response({"ok": True})


async def test_drop(request):
    for sid in list(state["connected"]):
        await sio.disconnect(sid)
    return web.json_response({"ok": True})


async def test_queue(request):
    body = await request.json()
    queues.setdefault(body["sessionId"], []).append(body["event"])
    changed.set()
    return web.json_response({"ok": True})


async def test_state(request):
    """The record; with ?after=N, waits (at most 30 s) until it changed past version N."""
    after = int(request.query.get("after", -1))
    async with state_changed:
        try:
            await asyncio.wait_for(state_changed.wait_for(lambda: state["version"] > after), 30)
        except asyncio.TimeoutError:
            pass
    return web.json_response(state)


app.router.add_post("/api/claw/sessions/send", send)
app.router.add_post("/api/claw/groups/panels/send", send)
app.router.add_post("/api/claw/sessions/watch", watch)
app.router.add_post("/api/claw/groups/panels/messages", panel_messages)
app.router.add_post("/api/claw/sessions/list", sessions_list)
app.router.add_post("/api/claw/groups/get", groups_get)
app.router.add_post("/test/emit", test_emit)
app.router.add_post("/test/drop", test_drop)
app.router.add_post("/test/queue", test_queue)
app.router.add_get("/test/state", test_state)


async def main():
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
