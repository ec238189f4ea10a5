// Nesting of user text: how deeply a JSON or YAML text nests, found by a linear scan
// before the text reaches a parser, so that absurdly nested input (200000 '[') is
// refused instead of exhausting the stack in the recursive parts of the JSON and YAML
// libraries (nlohmann's serializer, yaml-cpp's parser). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace slidedp {

// Nesting limits for what users send: JSON data lines, tokenizer.json, index.json,
// checkpoint headers (config.json and safetensors headers have their own, smaller ones).
inline constexpr int kMaxJsonNesting = 64;
// Job files (YAML or JSON): see YamlNestingExceeded. A job file needs a few levels and
// a few kilobytes.
inline constexpr int kMaxYamlNesting = 64;
inline constexpr size_t kMaxJobFileBytes = size_t{1} << 20;

// The deepest bracket ('[', '{') nesting of a JSON text, counted outside strings.
int JsonNestingDepth(std::string_view text);

// The 1-based line of `text` at which its JSON bracket nesting first exceeds `max_depth`,
// or 0 when it never does.
int JsonNestingExceeded(std::string_view text, int max_depth);

// The 1-based line of YAML `text` at which its nesting may exceed `max_depth`, or 0 when
// it cannot. Conservative (it may refuse odd but shallow text, never pass deep text):
// every '[' and '{' anywhere counts as one level of flow nesting (quotes are not trusted
// to hide brackets), and a line whose leading run of spaces and indicators ("- ", "? ",
// ": ") is longer than `max_depth` counts as too deep a block nesting (each level of
// block nesting costs at least one column).
int YamlNestingExceeded(std::string_view text, int max_depth);

}  // namespace slidedp
