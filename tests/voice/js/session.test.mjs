// node --test for the pure parts of web/session.js: the WebSocket URL and close-code messages.
import assert from "node:assert/strict";
import { test } from "node:test";

import { describeClose, sessionUrl } from "../../../web/session.js";

test("the socket goes to /ws on the page's own host, wss for https pages", () => {
  assert.equal(sessionUrl({ protocol: "http:", host: "127.0.0.1:8000" }), "ws://127.0.0.1:8000/ws");
  assert.equal(sessionUrl({ protocol: "https:", host: "voice.example.com" }),
    "wss://voice.example.com/ws");
  assert.equal(sessionUrl({ protocol: "http:", host: "[::1]:9000" }), "ws://[::1]:9000/ws");
  assert.equal(sessionUrl({ protocol: "https:", host: "v.example", search: "?token=12.abc%2F" }),
    "wss://v.example/ws?token=12.abc%2F");
});

test("close codes become messages that say what happened and what to do", () => {
  assert.match(describeClose(1006, ""), /dropped \(close code 1006\).*reconnect/);
  assert.match(describeClose(1013, "overloaded"), /at capacity \(overloaded\)/);
  assert.match(describeClose(1012, ""), /restarting/);
  assert.match(describeClose(1001, ""), /going away/);
  assert.match(describeClose(1011, "internal"), /internal error \(internal\)/);
  for (const code of [1003, 1007, 1008]) {
    assert.match(describeClose(code, "bad_json"), new RegExp(`rejected.*${code}.*bad_json`));
  }
  assert.match(describeClose(1000, "bye"), /ended the session \(bye\)/);
});
