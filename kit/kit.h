// kit.h: everything a strategy file may use, and the only project header it
// includes. The layers below (docs/README.md's map) come in through these:
//
//   strategy.h      the interface a strategy implements, and its context
//   resident.h      the state a rank keeps between steps: parameters, gradients,
//                   AdamW moments, in one flat buffer (offloaded or not)
//   unit_buffers.h  the full-size buffers a unit is gathered into and reduced from
//   partition.h     who holds what: whole tensors, row slices, flat ranges
//   replicas.h      the gradient all-reduce across replica groups (hybrid sharding)
//   shard_groups.h  the groups a hybrid strategy shards within
//   zeropp.h        ZeRO++'s flags and secondary shards: quantized gathers and reduces
//   device.h        memory and the device's copies and kernels (and, through
//                   strategy.h, comm.h: the collectives)
#ifndef SHARDLAB_KIT_H
#define SHARDLAB_KIT_H

#include "device/device.h"
#include "kit/partition.h"
#include "kit/replicas.h"
#include "kit/resident.h"
#include "kit/shard_groups.h"
#include "kit/strategy.h"
#include "kit/unit_buffers.h"
#include "kit/zeropp.h"
#include "util/errors.h"

#endif
