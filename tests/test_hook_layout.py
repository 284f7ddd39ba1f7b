"""The contracts between the C++ hook and Python, checked on both sides' source: the
`Row` the hook hands out is the schema's execution row, and the positions it reads
Python's `Recorded` answer at are Recorded's fields. Either side changed alone fails here."""
from __future__ import annotations

import re
import struct
from dataclasses import fields

from lazyviz.backends import Recorded, xla_io, xla_polls
from lazyviz.backends.ts import HOOK_FOLDER, REPEATED_ROW
from lazyviz.trace.schema import KIND_FIELDS, ROW_FIELDS
from lazyviz.trace.table import Kind

C_FORMATS = {"int64_t": "q", "double": "d"}


def hook_source() -> str:
    return "\n".join(part.read_text() for part in sorted(HOOK_FOLDER.iterdir()))


def test_the_hooks_row_is_the_schemas_execution_row() -> None:
    body = re.search(r"struct Row \{[^\n]*\n(.*?)\n\};", hook_source(), re.DOTALL)
    assert body is not None, "struct Row not found in the hook"
    names, codes = [], ""
    for declaration in body.group(1).split(";"):
        words = declaration.split()
        if words:
            declared = [n.strip(",") for n in words[1:]]
            names += declared
            codes += C_FORMATS[words[0]] * len(declared)
    assert tuple(names) == ROW_FIELDS
    assert "=" + codes == REPEATED_ROW.format
    size = re.search(r"static_assert\(sizeof\(Row\) == (\d+)", hook_source())
    assert size is not None and int(size.group(1)) == REPEATED_ROW.size == struct.calcsize("=" + codes)


def test_the_hook_reads_recorded_at_its_fields_positions() -> None:
    constants = dict(re.findall(r"kRecorded(\w+) = (\d+)", hook_source()))
    assert constants, "the hook names no Recorded positions"
    for name, position in constants.items():
        assert Recorded._fields[int(position)] == name.lower()


def test_a_kind_holds_the_schemas_kind_fields() -> None:
    # The reader's Kind has the frame where the schema stores file, line and function.
    stored = [f for f in KIND_FIELDS if f not in ("file", "line", "function")]
    stored.insert(KIND_FIELDS.index("file"), "frame")
    assert [f.name for f in fields(Kind)] == stored


def test_the_hook_writes_text_without_cpp_streams() -> None:
    # The hook is compiled by the user's g++ against torch's prebuilt libraries. With
    # Ubuntu 24.04's g++ 13 and torch 2.11's wheel, an ostringstream made in the hook
    # crashed the traced script (SIGSEGV) the first time torch's EmitShortFrameInfo wrote
    # a line number to it. Text is built from strings instead; a stream brought back
    # fails here, since no machine of CI's kind can show the crash.
    source = re.sub(r"//[^\n]*", "", hook_source())
    for stream in ("<sstream>", "stringstream", "std::ostream", "std::cout", "std::cerr", "EmitShortFrameInfo"):
        assert stream not in source, stream


def test_the_hooks_xla_polls_read_as_pythons_do() -> None:
    # hook/xla_steady.h reads the analysis file as lazyviz/backends/xla.py does and waits
    # for as many execute times: the same chunk, the same most awaiting. The period is
    # Python's alone (xla_arm is handed the time the times are next due).
    constants = dict(re.findall(r"constexpr \w+ (k\w+) = ([^;]+);", hook_source()))
    assert not any("Read" in name and name.endswith("S") for name in constants), constants
    assert int(constants["kAwaitingMost"]) == xla_polls._AWAITING_MOST
    value, shift = (int(part) for part in constants["kReadChunk"].split("<<"))  # "1 << 16"
    assert value << shift == xla_io.Tail._CHUNK
