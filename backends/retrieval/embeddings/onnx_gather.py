"""Keep a weight-only int8 embedding table int8 in memory: gather the rows, then dequantize them.

The local model stores each weight as int8 plus a scale and dequantizes it in the graph:
`table = Mul(Cast(table_q), scale)`, then `Gather(table, input_ids)`. onnxruntime folds that
constant expression when it builds the session, so the 30,522 x 384 word embeddings sit in memory
as 45 MB of float32 instead of 11 MB of int8, for the few rows a batch looks up. This rewrites
the graph to `Mul(Cast(Gather(table_q, ids)), Gather(scale, ids))`: the same multiplications on
the same values, so the vectors are bit-identical (tests/retrieval/test_embedding_memory.py), and the
session is ~34 MiB smaller (bench/README.md, issue 30).

The model is edited as protobuf wire format (field numbers from onnx.proto3), so no `onnx`
package is needed: only the nodes of the pattern change; every other byte is copied as it was.
A model without the pattern is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

Buffer = bytes | memoryview

# onnx.proto3 field numbers
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_ATTR_NAME, _ATTR_I, _ATTR_TYPE = 1, 3, 20
_ATTR_TYPE_INT = 2
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
_INT8 = 3
_FLOAT = 1
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: Buffer, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: Buffer) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start of the field's key, start of its value, end)."""
    pos, end = 0, len(buf)
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, stop = _varint(buf, pos)
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            stop = pos + size
        elif wire == _I64:
            stop = pos + 8
        elif wire == _I32:
            stop = pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, start, pos, stop
        pos = stop


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _node(op_type: str, inputs: list[str], outputs: list[str], name: str, **int_attributes: int) -> bytes:
    parts = [_len_field(_NODE_INPUT, i.encode()) for i in inputs]
    parts += [_len_field(_NODE_OUTPUT, o.encode()) for o in outputs]
    parts += [_len_field(_NODE_NAME, name.encode()), _len_field(_NODE_OP_TYPE, op_type.encode())]
    for attribute, value in int_attributes.items():
        body = (
            _len_field(_ATTR_NAME, attribute.encode())
            + _encode_varint(_ATTR_I << 3 | _VARINT)
            + _encode_varint(value)
            + _encode_varint(_ATTR_TYPE << 3 | _VARINT)
            + _encode_varint(_ATTR_TYPE_INT)
        )
        parts.append(_len_field(_NODE_ATTRIBUTE, body))
    return _len_field(_GRAPH_NODE, b"".join(parts))


@dataclass
class _Node:
    raw: Buffer  # the whole field (key, length, NodeProto)
    op_type: str = ""
    domain: str = ""
    name: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    int_attributes: tuple[tuple[str, int], ...] = ()
    other_attributes: bool = False


def _parse_node(raw: Buffer, body: Buffer) -> _Node:
    node = _Node(raw)
    inputs, outputs, ints = [], [], []
    for number, _wire, _start, value, stop in _fields(body):
        text = bytes(body[value:stop])
        if number == _NODE_INPUT:
            inputs.append(text.decode())
        elif number == _NODE_OUTPUT:
            outputs.append(text.decode())
        elif number == _NODE_OP_TYPE:
            node.op_type = text.decode()
        elif number == _NODE_DOMAIN:
            node.domain = text.decode()
        elif number == _NODE_NAME:
            node.name = text.decode()
        elif number == _NODE_ATTRIBUTE:
            name, integer, kind = "", None, None
            for a_number, _a_wire, _a_start, a_value, a_stop in _fields(text):
                if a_number == _ATTR_NAME:
                    name = text[a_value:a_stop].decode()
                elif a_number == _ATTR_I:
                    integer = _varint(text, a_value)[0]
                elif a_number == _ATTR_TYPE:
                    kind = _varint(text, a_value)[0]
            if kind == _ATTR_TYPE_INT and integer is not None:
                ints.append((name, integer))
            else:
                node.other_attributes = True
    node.inputs, node.outputs, node.int_attributes = tuple(inputs), tuple(outputs), tuple(ints)
    return node


def _tensor_header(body: Buffer) -> tuple[str, int, tuple[int, ...]]:
    """(name, data type, dims) of a TensorProto, without copying its data."""
    name, data_type, dims = "", 0, []
    for number, wire, _start, value, stop in _fields(body):
        if number == _TENSOR_NAME:
            name = bytes(body[value:stop]).decode()
        elif number == _TENSOR_DATA_TYPE:
            data_type = _varint(body, value)[0]
        elif number == _TENSOR_DIMS and wire == _VARINT:
            dims.append(_varint(body, value)[0])
        elif number == _TENSOR_DIMS and wire == _LEN:  # packed
            pos = value
            while pos < stop:
                dim, pos = _varint(body, pos)
                dims.append(dim)
    return name, data_type, tuple(dims)


def _rewrite_graph(graph: Buffer) -> list[Buffer] | None:
    """The graph's fields, in order, with the pattern's nodes replaced; None without it."""
    nodes: list[_Node | Buffer] = []  # a parsed node, or another field as it was
    tensors: dict[str, tuple[int, tuple[int, ...]]] = {}
    for number, wire, start, value, stop in _fields(graph):
        if number == _GRAPH_NODE and wire == _LEN:
            nodes.append(_parse_node(graph[start:stop], graph[value:stop]))
            continue
        if number == _GRAPH_INITIALIZER and wire == _LEN:
            name, data_type, dims = _tensor_header(graph[value:stop])
            tensors[name] = (data_type, dims)
        nodes.append(graph[start:stop])
    parsed = [n for n in nodes if isinstance(n, _Node)]
    producer = {output: n for n in parsed for output in n.outputs}
    consumers: dict[str, list[_Node]] = {}
    for n in parsed:
        for name in n.inputs:
            consumers.setdefault(name, []).append(n)

    replaced: dict[int, list[Buffer]] = {}  # id(node) -> its replacement
    for gather in parsed:
        if gather.op_type != "Gather" or gather.domain or gather.other_attributes or len(gather.inputs) != 2:
            continue
        if dict(gather.int_attributes).get("axis", 0) != 0:
            continue
        table, ids = gather.inputs
        mul = producer.get(table)
        if mul is None or mul.op_type != "Mul" or mul.domain or len(consumers.get(table, ())) != 1:
            continue
        if len(mul.inputs) != 2:
            continue
        first, second = (producer.get(name) for name in mul.inputs)
        cast, scale = (first, mul.inputs[1]) if first is not None and first.op_type == "Cast" else (second, mul.inputs[0])
        if cast is None or cast.op_type != "Cast" or len(consumers.get(cast.outputs[0], ())) != 1:
            continue
        if dict(cast.int_attributes).get("to") != _FLOAT or len(cast.inputs) != 1:
            continue
        quantized = cast.inputs[0]
        q_type, q_dims = tensors.get(quantized, (0, ()))
        s_type, s_dims = tensors.get(scale, (0, ()))
        if q_type != _INT8 or len(q_dims) != 2 or s_type != _FLOAT:
            continue
        rows = f"{table}.rows"
        new: list[Buffer] = [_node("Gather", [quantized, ids], [f"{rows}_q"], f"{gather.name}_q", axis=0)]
        new.append(_node("Cast", [f"{rows}_q"], [f"{rows}_f"], f"{gather.name}_cast", to=_FLOAT))
        if s_dims == (q_dims[0], 1):  # a scale per row: gather it too
            new.append(_node("Gather", [scale, ids], [f"{rows}_scale"], f"{gather.name}_scale", axis=0))
            scale = f"{rows}_scale"
        elif s_dims not in ((), (1,)):  # a scale per column or per block: left as it was
            continue
        new.append(_node("Mul", [f"{rows}_f", scale], list(gather.outputs), f"{gather.name}_mul"))
        replaced[id(gather)] = new
        replaced[id(mul)] = replaced[id(cast)] = []
    if not replaced:
        return None
    out: list[Buffer] = []
    for n in nodes:
        out.extend(replaced.get(id(n), [n.raw]) if isinstance(n, _Node) else [n])
    return out


def gather_before_dequantize(model: Buffer) -> list[Buffer] | None:
    """The pieces of `model` (a serialized ModelProto) with each Gather over a dequantized int8
    table turned into a Gather over the int8 table, to be written out in order; None when no
    Gather has that shape. The pieces are slices of `model` (views when it is a memoryview: the
    model is never copied whole) and the few new nodes."""
    model = memoryview(model)
    out: list[Buffer] = []
    changed = False
    for number, wire, start, value, stop in _fields(model):
        if number == _MODEL_GRAPH and wire == _LEN:
            graph = _rewrite_graph(model[value:stop])
            if graph is not None:
                out.append(_encode_varint(_MODEL_GRAPH << 3 | _LEN) + _encode_varint(sum(len(p) for p in graph)))
                out.extend(graph)
                changed = True
                continue
        out.append(model[start:stop])
    return out if changed else None


def write_gather_before_dequantize(model: Buffer, out: BinaryIO) -> None:
    """Write `model` to `out`, edited as `gather_before_dequantize` says (as it is without the
    pattern). Holds no view of `model` once it returns (an mmap can then be closed)."""
    pieces = gather_before_dequantize(model)
    for piece in pieces if pieces is not None else [model]:
        out.write(piece)
