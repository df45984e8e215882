/* The bivouac SDK: everything a plugin may include. */
#ifndef BIVOUAC_BIVOUAC_H
#define BIVOUAC_BIVOUAC_H

#include "bivouac/cloud.h"
#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/graph.h"
#include "bivouac/log.h"
#include "bivouac/model.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "bivouac/schedule.h"
#include "bivouac/series.h"
#include "bivouac/tensor.h"
#include "bivouac/transport.h"
#include "bivouac/wire.h"

#define BIVOUAC_VERSION_STRING "0.1.0"

#endif
