// The IR text of a graph, as torch's DumpUtil prints it, without its cost.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- IR text: torch's DumpUtil::PostOrderToText, without its cost -------------------
//
// The same text, line for line: `%id = shapes op(%operands), tag=value..., ROOT=r,
// NodeType=...`. torch takes each node's tags apart from node->ToString() with a
// std::regex it builds anew for every tag, about 15 us a node: a 5,000-node graph cost
// 75 ms to print at each compile, and a loop without mark_step compiles a bigger graph
// at every sync. Here the tags are read by hand, under torch's rules: a tag is
// `name=` (letters, digits, _) after the op's name, and its value runs to the next ", "
// outside the first kind of bracket it opens.
void AppendTags(std::string& out, const Node* node) {
  const std::string text = node->ToString();
  const std::string op = node->op().ToString();
  size_t at = text.find(op);
  if (at == std::string::npos) return;  // torch would refuse the graph; print it without
  at += op.size();
  auto skip_separator = [&text](size_t pos) { return text.compare(pos, 2, ", ") == 0 ? pos + 2 : pos; };
  for (;;) {
    at = skip_separator(at);
    size_t name_end = at;
    while (name_end < text.size() && (std::isalnum(static_cast<unsigned char>(text[name_end])) || text[name_end] == '_')) {
      ++name_end;
    }
    if (name_end == at || name_end >= text.size() || text[name_end] != '=') return;
    size_t value = name_end + 1;
    char open = 0, close = 0;
    size_t depth = 1;
    size_t pos = value;
    for (; pos < text.size(); ++pos) {
      char c = text[pos];
      if (open == 0) {
        if (skip_separator(pos) != pos) break;
        if (c == '(') open = '(', close = ')';
        else if (c == '[') open = '[', close = ']';
        else if (c == '{') open = '{', close = '}';
      } else if (c == close) {
        if (--depth == 0) depth = 1, open = close = 0;
      } else if (c == open) {
        ++depth;
      }
    }
    out += ", ";
    out.append(text, at, name_end - at);
    out += '=';
    out.append(text, value, pos - value);
    at = pos;
  }
}

std::string PostOrderText(c10::ArrayRef<const Node*> post_order, c10::ArrayRef<const Node*> roots) {
  std::unordered_map<const Node*, size_t> ids;
  ids.reserve(post_order.size());
  for (const Node* node : post_order) ids.emplace(node, ids.size());
  std::unordered_map<const Node*, size_t> root_ids;
  for (size_t i = 0; i < roots.size(); ++i) root_ids[roots[i]] = i;
  std::string out = "IR {\n";
  out.reserve(post_order.size() * 160);
  for (const Node* node : post_order) {
    out += "  %";
    out += std::to_string(ids.at(node));
    out += " = [";  // the shapes as c10 prints an ArrayRef of them
    bool first_shape = true;
    for (const Shape& shape : node->shapes()) {
      if (!first_shape) out += ", ";
      first_shape = false;
      out += shape.to_string();
    }
    out += "] ";
    out += node->op().ToString();
    out += '(';
    bool first = true;
    for (const Output& operand : node->operands()) {
      if (!first) out += ", ";
      first = false;
      out += '%';
      out += std::to_string(ids.at(operand.node));
      if (operand.node->num_outputs() > 1) {
        out += '.';
        out += std::to_string(operand.index);
      }
    }
    out += ')';
    AppendTags(out, node);
    auto root = root_ids.find(node);
    if (root != root_ids.end()) {
      out += ", ROOT=";
      out += std::to_string(root->second);
    }
    out += ", NodeType=";
    out += typeid(*node).name();
    out += '\n';
  }
  out += "}\n";
  return DecodeLocations(out);  // a node keeps a reference to its line (source_lines.h)
}

// Both texts of the graph behind these lazy tensors, ours and torch's (its node
// references decoded, as ours are): a test checks they are the same.
py::tuple ir_texts(const std::vector<at::Tensor>& tensors) {
  std::vector<const Node*> roots;
  for (const at::Tensor& tensor : tensors) {
    LazyTensorPtr lazy = TryGetLtcTensor(tensor);
    TORCH_CHECK(lazy, "ir_texts takes lazy tensors");
    Value value = lazy->GetIrValue();
    roots.push_back(value.node.get());
  }
  std::vector<const Node*> post_order = Util::ComputePostOrder(roots);
  return py::make_tuple(PostOrderText(post_order, roots), DecodeLocations(DumpUtil::PostOrderToText(post_order, roots)));
}

}  // namespace
