/*
 * test_log.c - broker/src/log.c: the JSON line format. Every line parses
 * (jansson), control characters and bytes that are not UTF-8 are escaped or
 * replaced, key=value tails become typed fields, and a tail that is not a clean
 * run of key=value parts stays in the message. Each test runs in its own
 * process (fork mode), so redirecting stderr there touches nothing else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "process_test.h"

/* Runs the lines through qn_log with stderr redirected; returns the parsed
 * objects (a JSON array, caller decrefs). Fails the test if a line does not
 * parse or is not one object. */
static json_t *logged(void (*emit)(void))
{
    char path[] = "/tmp/qn-test-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    emit();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fdopen(fd, "r");
    ck_assert_ptr_nonnull(f);
    rewind(f);
    json_t *all = json_array();
    char line[16384];
    while (fgets(line, sizeof line, f) != NULL) {
        size_t n = strlen(line);
        ck_assert_msg(n > 0 && line[n - 1] == '\n', "a line without its newline");
        for (size_t i = 0; i + 1 < n; i++)
            ck_assert_msg((unsigned char)line[i] >= 0x20, "raw control byte in: %s", line);
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        ck_assert_msg(o != NULL, "not JSON (%s): %s", err.text, line);
        ck_assert(json_is_object(o));
        ck_assert_msg(json_is_string(json_object_get(o, "time")), "%s", line);
        ck_assert_msg(json_is_string(json_object_get(o, "level")), "%s", line);
        ck_assert_msg(json_is_string(json_object_get(o, "message")), "%s", line);
        json_array_append_new(all, o);
    }
    fclose(f);
    unlink(path);
    return all;
}

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void emit_fields(void)
{
    qn_log_set_format(QN_LOG_JSON);
    qn_log_set_level(QN_LOG_DEBUG);
    QN_INFO("rates pushed_per_s=%d delivered_per_s=%d frames_per_segment=%.1f duplicates=%d", 120,
            -3, 12.5, 0);
    QN_DEBUG("connection closed peer=%s reason=\"%s\"", "127.0.0.1:5000", "peer closed");
    QN_WARN("database unavailable");
    QN_ERROR("health service=\"\" status=%s message=%s", "SERVING", "clash");
}

START_TEST(fields_become_typed)
{
    json_t *all = logged(emit_fields);
    ck_assert_uint_eq(json_array_size(all), 4);
    json_t *r = json_array_get(all, 0);
    ck_assert_str_eq(str(r, "level"), "info");
    ck_assert_str_eq(str(r, "message"), "rates");
    ck_assert_int_eq(json_integer_value(json_object_get(r, "pushed_per_s")), 120);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "delivered_per_s")), -3);
    ck_assert(json_is_real(json_object_get(r, "frames_per_segment")));
    ck_assert_double_eq(json_real_value(json_object_get(r, "frames_per_segment")), 12.5);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "duplicates")), 0);
    /* RFC 3339, UTC, milliseconds */
    const char *t = str(r, "time");
    ck_assert_uint_eq(strlen(t), 24);
    ck_assert(t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[23] == 'Z');
    json_t *c = json_array_get(all, 1);
    ck_assert_str_eq(str(c, "level"), "debug");
    ck_assert_str_eq(str(c, "message"), "connection closed");
    ck_assert_str_eq(str(c, "peer"), "127.0.0.1:5000");
    ck_assert_str_eq(str(c, "reason"), "peer closed");
    json_t *d = json_array_get(all, 2);
    ck_assert_str_eq(str(d, "message"), "database unavailable");
    ck_assert_uint_eq(json_object_size(d), 3);
    json_t *h = json_array_get(all, 3);
    ck_assert_str_eq(str(h, "level"), "error");
    ck_assert_str_eq(str(h, "message"), "health");
    ck_assert_str_eq(str(h, "service"), "");
    ck_assert_str_eq(str(h, "status"), "SERVING");
    ck_assert_str_eq(str(h, "message_"), "clash"); /* never overwrites the message */
    json_decref(all);
}
END_TEST

static void emit_hostile(void)
{
    qn_log_set_format(QN_LOG_JSON);
    QN_INFO("bell\a tab\t nl\n cr\r esc\x1b quote\" backslash\\ end");
    QN_INFO("bad utf8 \xff\xfe and \xc3\x28 and good caf\xc3\xa9 \xe2\x98\x83");
    QN_INFO("value with control key=\"a\x01z\" other=b\x02");
    QN_INFO("metrics purge failed: %s detail=%s", "database unavailable", "server closed the link");
    QN_INFO("cannot listen on %s port %d: %s", "0.0.0.0", 6632, "Address already in use");
    QN_INFO("x=\"%s\"", "only a field");
    QN_INFO("x=%s", "bare words after");
}

START_TEST(hostile_text_still_parses)
{
    json_t *all = logged(emit_hostile);
    ck_assert_uint_eq(json_array_size(all), 7);
    ck_assert_str_eq(str(json_array_get(all, 0), "message"),
                     "bell\a tab\t nl\n cr\r esc\x1b quote\" backslash\\ end");
    ck_assert_str_eq(str(json_array_get(all, 1), "message"),
                     "bad utf8 \xef\xbf\xbd\xef\xbf\xbd and \xef\xbf\xbd( and good caf\xc3\xa9 "
                     "\xe2\x98\x83");
    json_t *v = json_array_get(all, 2);
    ck_assert_str_eq(str(v, "message"), "value with control");
    ck_assert_str_eq(str(v, "key"), "a\x01z");
    ck_assert_str_eq(str(v, "other"), "b\x02");
    /* a tail that is not key=value parts only: everything stays in the message */
    json_t *p = json_array_get(all, 3);
    ck_assert_str_eq(str(p, "message"),
                     "metrics purge failed: database unavailable detail=server closed the link");
    ck_assert_ptr_null(json_object_get(p, "detail"));
    ck_assert_str_eq(str(json_array_get(all, 4), "message"),
                     "cannot listen on 0.0.0.0 port 6632: Address already in use");
    json_t *x = json_array_get(all, 5);
    ck_assert_str_eq(str(x, "message"), "");
    ck_assert_str_eq(str(x, "x"), "only a field");
    /* an unquoted value ends at the space: the words after break the run */
    json_t *w = json_array_get(all, 6);
    ck_assert_str_eq(str(w, "message"), "x=bare words after");
    ck_assert_ptr_null(json_object_get(w, "x"));
    json_decref(all);
}
END_TEST

static void emit_long(void)
{
    qn_log_set_format(QN_LOG_JSON);
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    QN_INFO("long %s", big); /* truncated at the line limit, still one object */
    QN_INFO("after");
}

START_TEST(long_lines_are_cut_not_broken)
{
    json_t *all = logged(emit_long);
    ck_assert_uint_eq(json_array_size(all), 2);
    ck_assert(strncmp(str(json_array_get(all, 0), "message"), "long aaa", 8) == 0);
    ck_assert_str_eq(str(json_array_get(all, 1), "message"), "after");
    json_decref(all);
}
END_TEST

static void emit_text(void)
{
    qn_log_set_format(QN_LOG_TEXT);
    QN_INFO("listening h2c_port=%d", 6632);
}

START_TEST(text_format_unchanged)
{
    char path[] = "/tmp/qn-test-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    int saved = dup(2);
    dup2(fd, 2);
    emit_text();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char line[256] = "";
    FILE *f = fdopen(fd, "r");
    rewind(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    unlink(path);
    ck_assert_uint_eq(strlen(line), 24 + 1 + 4 + 1 + strlen("listening h2c_port=6632") + 1);
    ck_assert(strstr(line, "Z INFO listening h2c_port=6632\n") != NULL);
}
END_TEST

Suite *qn_test_log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *t = tcase_create("json");
    tcase_add_test(t, fields_become_typed);
    tcase_add_test(t, hostile_text_still_parses);
    tcase_add_test(t, long_lines_are_cut_not_broken);
    tcase_add_test(t, text_format_unchanged);
    suite_add_tcase(s, t);
    return s;
}
