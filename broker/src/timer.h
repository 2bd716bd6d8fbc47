/*
 * timer.h - private to broker/: milliseconds as libevent timeouts, one
 * conversion for every timer of the broker (call deadlines, backoffs, sweeps,
 * walks). Header only.
 */
#ifndef QN_BROKER_TIMER_H
#define QN_BROKER_TIMER_H

#include <event2/event.h>
#include <stdint.h>
#include <sys/time.h>

/* ms as a struct timeval; a negative ms counts as 0 (at once). */
static inline struct timeval qn_tv_ms(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* (Re)arms ev (a timer, one-shot or EV_PERSIST) to fire ms from now (negative:
 * at once); event_add's result. */
static inline int qn_timer_after(struct event *ev, int64_t ms)
{
    struct timeval tv = qn_tv_ms(ms);
    return event_add(ev, &tv);
}

#endif
