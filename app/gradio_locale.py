"""Gradio's own words ("Drop File Here", "Click to Upload", a chatbot's buttons) in the page's language.

Gradio translates them by the browser's language, once, as its page starts, and hands every component that
translation: a later change of its locale (what its Settings panel does) reaches no component already built. So
the page's choice is kept in the browser (`LOCALE_KEY`, written when a language is chosen in the header),
and a script first in the page's head has Gradio read it as the browser's language at the next load. The script
goes in by `LocaleHead`, a middleware around Gradio's page: Gradio's own `head` is added by its frontend after its
translations are set up, too late.
"""
from __future__ import annotations

import json

from starlette.middleware import Middleware

from app import i18n

LOCALE_KEY = "workbench-gradio-locale"
LOCALES = {"en": "en", "zh": "zh-CN"}  # the page's language -> Gradio's locale

# On choosing a language (the picker's event runs it first, then hands the choice to the server): kept for the
# next load; the page's lang attribute follows now (CJK fonts go by it). Not through Gradio's changeLocale: the
# components already built keep their words, so it would only re-render every one of them mid-switch.
CHOSEN_JS = """(code) => {
  const want = %s[code] || 'en';
  try { localStorage.setItem(%s, want); } catch (e) {}
  document.documentElement.lang = want;
  return code;
}""" % (json.dumps(LOCALES), json.dumps(LOCALE_KEY))


def head_script(lang: str) -> bytes:
    """The browser's language as Gradio will read it: the page's chosen one, else the server's --lang when that is
    not English (a browser that chose nothing keeps its own)."""
    fallback = LOCALES[i18n.pick(lang)] if i18n.pick(lang) != i18n.DEFAULT else None
    return ("<script>(() => { let l = null; try { l = localStorage.getItem(%s); } catch (e) {} l = l || %s; "
            "if (!l) return; document.documentElement.lang = l; "
            "for (const [k, v] of [['language', l], ['languages', [l]]]) "
            "Object.defineProperty(Navigator.prototype, k, {get: () => v, configurable: true}); })();</script>"
            % (json.dumps(LOCALE_KEY), json.dumps(fallback))).encode()


class LocaleHead:
    """Puts `head_script` first in the head of every HTML page the app answers with (Gradio's page)."""

    def __init__(self, app, lang: str = i18n.DEFAULT):
        self.app, self.script = app, head_script(lang)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET":
            return await self.app(scope, receive, send)
        start, parts = None, []

        async def send_wrapped(message):
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if not html or headers.get(b"content-encoding"):
                    start = False
                    return await send(message)
                start = message
                return None
            if start is False:
                return await send(message)
            parts.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            body = b"".join(parts)
            at = body.find(b"<head>")
            if at >= 0:
                body = body[:at + 6] + self.script + body[at + 6:]
            headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return await self.app(scope, receive, send_wrapped)


def middleware(lang: str) -> Middleware:
    return Middleware(LocaleHead, lang=lang)
