// mem_timeline.h: one training step's memory over time. While a timeline is
// attached to an account (memory.h), every allocation and free of the account
// is kept as an event: when, in which part of the step (the phase the training
// passes set, and the unit), which category, how many bytes, and the total
// after it. The trainers record one step (the last, or --timeline-step K) into
// the Chrome trace and the summary; build/plan --timeline records the same
// step of a dry run, event for event.
#ifndef SHARDLAB_MEM_TIMELINE_H
#define SHARDLAB_MEM_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "device/memory.h"

// Attaches an empty timeline to `acct`: its events from now on are recorded.
void mem_timeline_start(MemTimeline *timeline, MemAccount *acct);
// Detaches it; the events stay.
void mem_timeline_stop(MemTimeline *timeline, MemAccount *acct);
void mem_timeline_free(MemTimeline *timeline);

// The first moment the device's total reached its highest: the index of that event (or
// -1 if no event), the total, and each category's bytes then (in `held`).
long mem_timeline_peak(const MemTimeline *timeline, uint64_t *total, uint64_t held[MEM_NUM_CATEGORIES]);

#endif
