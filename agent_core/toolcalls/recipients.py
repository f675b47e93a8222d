"""Formats that name the tool on a line of its own and put its JSON arguments after it:
Functionary v3.2's recipients (``>>>NAME\\n{...}``) and llama-cpp-python's
``functions.NAME:\\n{...}``."""

from __future__ import annotations

from itertools import islice

from .. import _jsonscan
from .._lazyre import lazy
from .base import MAX_CALLS, Call, Found, arguments_of


def _json_call(name: str, body: str, rule: str) -> Call:
    span = next(_jsonscan.balanced_spans(body, "{"), None)
    if span is None:
        return Call(name, None, f"{rule}: no JSON arguments after {name!r}")
    arguments, problem, _ = arguments_of(body[span[0]:span[1]], name)
    return Call(name, arguments, problem)


class FunctionaryV32:
    """Functionary v3.2 (MeetKai): ``>>>NAME\\n{...}`` for each call and ``>>>all\\ntext``
    for text; the first recipient follows the prompt's own ``>>>``, so the parser gives an
    output that begins ``NAME\\n`` (a tool's name) or ``all\\n`` here with it put back."""

    name, markers = "functionary_v32", (">>>",)
    _recipient = lazy(r">>>([A-Za-z_][\w.-]*)\n")

    def read(self, text: str) -> Found | None:
        heads = list(islice(self._recipient.finditer(text), MAX_CALLS + 1))
        if not heads:
            return None
        calls: list[Call] = []
        said = [text[:heads[0].start()]]
        for m, following in zip(heads, [*heads[1:], None], strict=True):
            recipient = m.group(1)
            body = text[m.end():following.start() if following else len(text)]
            if recipient == "all":
                said.append(body)
            elif not body.strip():
                calls.append(Call(recipient, None,
                                  f"{self.name}: the call to {recipient!r} is cut off"))
            elif recipient == "python" and not body.lstrip().startswith("{"):
                # raw code has no end of its own: only another recipient after it ends it
                calls.append(Call(recipient, {"code": body.strip()}) if following else Call(
                    recipient, None, f"{self.name}: the python code runs to the end of the "
                                     "output and may be cut off"))
            else:
                calls.append(_json_call(recipient, body, self.name))
        if calls:
            return Found(self.name, calls)
        return Found(self.name, answer="".join(said))


class FunctionsPrefix:
    """``functions.NAME:\\n{...}`` for each call (llama-cpp-python's
    ``chatml-function-calling`` and ``functionary`` chat formats)."""

    name, markers = "functions_prefix", ("functions.",)
    _head = lazy(r"(?:^|\n)[ \t]*functions\.([A-Za-z_][\w.-]*):[ \t]*(?=\r?\n|\{)")

    def read(self, text: str) -> Found | None:
        heads = list(islice(self._head.finditer(text), MAX_CALLS + 1))
        if not heads:
            return None
        calls = [_json_call(m.group(1), text[m.end():following.start() if following else None],
                            self.name)
                 for m, following in zip(heads, [*heads[1:], None], strict=True)]
        return Found(self.name, calls)
