// kit.h: everything a strategy file may use, and the only project header it
// includes. The layers below (docs/README.md's map) come in through these:
//
//   strategy.h      the interface a strategy implements, and its context
//   resident.h      the state a rank keeps between steps: parameters, gradients,
//                   AdamW moments, in one flat buffer (offloaded or not)
//   unit_buffers.h  the full-size buffers a unit is gathered into and reduced from,
//                   and a collective's copy-in and copy-out buffers
//   partition.h     who holds what: whole tensors, row slices, flat ranges
//   replicas.h      the small tensors FSDP keeps whole on every rank
//   wire.h          how a sharded strategy's collectives travel: hybrid groups, whole
//                   tensors' all-reduce, ZeRO++ (zeropp.h, which only wire.c uses)
//   device.h        memory and the device's copies and kernels (and, through
//                   strategy.h, comm.h: the collectives)
#ifndef SHARDLAB_KIT_H
#define SHARDLAB_KIT_H

#include "device/device.h"
#include "kit/partition.h"
#include "kit/replicas.h"
#include "kit/resident.h"
#include "kit/strategy.h"
#include "kit/unit_buffers.h"
#include "kit/wire.h"
#include "util/errors.h"

#endif
