// Fixture of tests/runtime/layers_check.sh: a model file that includes the data layer above it.
#pragma once

#include "runtime/data/below_nothing.h"
