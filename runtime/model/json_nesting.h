// JsonNestingDepth: the deepest bracket nesting of a JSON text, counted outside
// strings, so that parsers can refuse absurdly nested input before it reaches the
// recursive parts of the JSON library. Pure function; any thread.
#pragma once

#include <string_view>

namespace slidedp {

int JsonNestingDepth(std::string_view text);

}  // namespace slidedp
