// Fixture of tests/runtime/layers_check.sh: a data file that includes the model layer below it.
#pragma once

#include "runtime/model/upward.h"
