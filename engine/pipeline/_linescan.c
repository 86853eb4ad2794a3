/* The aggregated scan's per-line work (pipeline/scan.py, Scanner._aggregate_chunk) in compiled code,
 * against the Hyperscan library itself: the Python binding calls back into Python once per match,
 * which on a log where most lines are signature hits costs more than everything else.
 *
 * classify() scans a chunk with the line matcher's database, groups the matches by line and settles
 * the lines the aggregated path only counts: every hit is a signature's whose tally keeps no more
 * records, confirmed as it stands, with no failure word, config key or unsound text on the line,
 * after a launcher prefix only when it is Ray's `(name pid=…)`, in carriage-return redraws only
 * when they are kept the way inputs/normalize.segments keeps them. Every other line is handed back
 * to Python with its ids, in line order, and takes the Python path exactly as before. What is
 * settled here is only counted (per signature: how many hits, and where the last one ends), so the
 * facts do not change: the equivalence tests compare this path with the full path.
 *
 * A call told to `defer` makes no Python call at all, so it can run in a thread while Python settles
 * an earlier chunk (Scanner.scan with threads): a line whose hit only Python can confirm is handed
 * back as deferred. Built with PCRE2, the module confirms most such hits itself.
 *
 * The rules here mirror scan.py (_may_have_prefix, _RAY_PID_PREFIX, _kept_redraws, _is_redraw,
 * _sort_line, _confirm, _count_hits); a change there must be made here too, and the equivalence
 * tests run both.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <hs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

/* Bits of the per-id flags scan.py passes (NATIVE_* there). */
#define F_SIMPLE 1    /* a confirmed hit counts without more checks (not gated, not distinct, kind ok) */
#define F_SATURATED 2 /* its tally keeps no more records (at the chunk's start) */
#define F_EXACT 4     /* the translation is exact */
#define F_ANCHORED 8  /* the pattern depends on where the text starts */
#define F_KINDSKIP 16 /* the signature does not apply to this kind of file */

/* Roles of the markers (pipeline/matcher.py). */
#define R_SLOW 1
#define R_CONFIG 2
#define R_REDRAWN 8

#define ID_BITS 11
#define ID_MASK ((1u << ID_BITS) - 1)

typedef struct {
    uint64_t *v;
    size_t n, cap;
} u64vec;

static int push(u64vec *a, uint64_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        uint64_t *grown = realloc(a->v, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* Room for `need` items of `size` bytes in *items (doubling, from 4096); -1 when out of memory. */
static int reserve(void **items, size_t *room, size_t need, size_t size) {
    if (need <= *room)
        return 0;
    size_t grown_room = *room ? *room : 4096;
    while (grown_room < need)
        grown_room *= 2;
    void *grown = realloc(*items, grown_room * size);
    if (grown == NULL)
        return -1;
    *items = grown;
    *room = grown_room;
    return 0;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void sort_u64(u64vec *a) {
    for (size_t i = 1; i < a->n; i++) {
        if (a->v[i - 1] > a->v[i]) {
            qsort(a->v, a->n, sizeof *a->v, compare_u64);
            return;
        }
    }
}

/* ---- the database and its scratch ---- */

typedef struct {
    PyObject_HEAD hs_database_t *db;
} DatabaseObject;

typedef struct {
    PyObject_HEAD hs_scratch_t *scratch;
} ScratchObject;

static PyObject *HyperscanError;

static void database_dealloc(DatabaseObject *self) {
    if (self->db != NULL)
        hs_free_database(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void scratch_dealloc(ScratchObject *self) {
    if (self->scratch != NULL)
        hs_free_scratch(self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *database_dumps(DatabaseObject *self, PyObject *Py_UNUSED(ignored)) {
    char *bytes = NULL;
    size_t length = 0;
    if (hs_serialize_database(self->db, &bytes, &length) != HS_SUCCESS)
        return PyErr_Format(HyperscanError, "the database could not be serialised");
    PyObject *out = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)length);
    free(bytes);
    return out;
}

static PyTypeObject ScratchType;

static PyObject *database_scratch(DatabaseObject *self, PyObject *Py_UNUSED(ignored)) {
    ScratchObject *out = PyObject_New(ScratchObject, &ScratchType);
    if (out == NULL)
        return NULL;
    out->scratch = NULL;
    if (hs_alloc_scratch(self->db, &out->scratch) != HS_SUCCESS) {
        Py_DECREF(out);
        return PyErr_Format(HyperscanError, "no scratch space for the database");
    }
    return (PyObject *)out;
}

static PyMethodDef database_methods[] = {
    {"dumps", (PyCFunction)database_dumps, METH_NOARGS, "The database as bytes, for loads()."},
    {"scratch", (PyCFunction)database_scratch, METH_NOARGS, "Scratch space for scanning with this database (one per thread)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DatabaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Database",
    .tp_basicsize = sizeof(DatabaseObject),
    .tp_dealloc = (destructor)database_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled Hyperscan database (block mode).",
    .tp_methods = database_methods,
};

static PyTypeObject ScratchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Scratch",
    .tp_basicsize = sizeof(ScratchObject),
    .tp_dealloc = (destructor)scratch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hyperscan scratch space: one thread scans with it at a time.",
};

static DatabaseObject *new_database(hs_database_t *db) {
    DatabaseObject *out = PyObject_New(DatabaseObject, &DatabaseType);
    if (out == NULL) {
        hs_free_database(db);
        return NULL;
    }
    out->db = db;
    return out;
}

static PyObject *compile_database(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *expressions, *flags;
    if (!PyArg_ParseTuple(args, "OO", &expressions, &flags))
        return NULL;
    PyObject *exprs = PySequence_Fast(expressions, "expressions must be a sequence of bytes");
    if (exprs == NULL)
        return NULL;
    PyObject *flag_seq = PySequence_Fast(flags, "flags must be a sequence of int");
    if (flag_seq == NULL) {
        Py_DECREF(exprs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(exprs);
    PyObject *result = NULL;
    const char **texts = NULL;
    unsigned int *flag_values = NULL, *ids = NULL;
    if (PySequence_Fast_GET_SIZE(flag_seq) != n || n == 0) {
        PyErr_SetString(PyExc_ValueError, "one flag per expression, and at least one expression");
        goto done;
    }
    texts = malloc(sizeof *texts * (size_t)n);
    flag_values = malloc(sizeof *flag_values * (size_t)n);
    ids = malloc(sizeof *ids * (size_t)n);
    if (texts == NULL || flag_values == NULL || ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(exprs, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "expressions must be bytes");
            goto done;
        }
        texts[i] = PyBytes_AS_STRING(item);
        unsigned long value = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(flag_seq, i));
        if (PyErr_Occurred())
            goto done;
        flag_values[i] = (unsigned int)value;
        ids[i] = (unsigned int)i;
    }
    hs_database_t *db = NULL;
    hs_compile_error_t *error = NULL;
    hs_error_t status;
    Py_BEGIN_ALLOW_THREADS status = hs_compile_multi(texts, flag_values, ids, (unsigned int)n, HS_MODE_BLOCK, NULL, &db, &error);
    Py_END_ALLOW_THREADS if (status != HS_SUCCESS) {
        if (error != NULL) {
            PyErr_Format(HyperscanError, "expression %d: %s", error->expression, error->message);
            hs_free_compile_error(error);
        } else {
            PyErr_Format(HyperscanError, "compiling failed (%d)", (int)status);
        }
        goto done;
    }
    result = (PyObject *)new_database(db);
done:
    free(texts);
    free(flag_values);
    free(ids);
    Py_DECREF(exprs);
    Py_DECREF(flag_seq);
    return result;
}

static PyObject *load_database(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *data;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "y#", &data, &length))
        return NULL;
    hs_database_t *db = NULL;
    if (hs_deserialize_database(data, (size_t)length, &db) != HS_SUCCESS)
        return PyErr_Format(HyperscanError, "not a database this library can load");
    return (PyObject *)new_database(db);
}

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) { return PyUnicode_FromString(hs_version()); }

/* ---- a signature's own pattern, with PCRE2 (built with it only) ----
 * For the few signatures no Hyperscan database states (a backreference, a lookahead): their hits
 * are confirmed with the pattern itself, which PCRE2 runs without Python, as Hyperscan's Chimera
 * pairs the two. matcher.py uses one only where the pattern means the same to PCRE2 as to Python's
 * regex on the text that reaches it (ASCII and block elements), checked on the signature's examples. */

#ifdef HAVE_PCRE2
typedef struct {
    PyObject_HEAD pcre2_code *code;
} PatternObject;

static void pattern_dealloc(PatternObject *self) {
    if (self->code != NULL)
        pcre2_code_free(self->code);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1: the pattern is found in the text; 0: not; -1: PCRE2 gave up (a limit, text that is not UTF-8). */
static int pattern_found(pcre2_code *code, pcre2_match_data *match, const unsigned char *text, size_t length) {
    int found = pcre2_match(code, (PCRE2_SPTR)text, (PCRE2_SIZE)length, 0, 0, match, NULL);
    return found >= 0 ? 1 : found == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

static PyObject *pattern_search(PatternObject *self, PyObject *args) {
    Py_buffer text;
    if (!PyArg_ParseTuple(args, "y*", &text))
        return NULL;
    pcre2_match_data *match = pcre2_match_data_create(1, NULL);
    if (match == NULL) {
        PyBuffer_Release(&text);
        return PyErr_NoMemory();
    }
    int found = pattern_found(self->code, match, text.buf, (size_t)text.len);
    pcre2_match_data_free(match);
    PyBuffer_Release(&text);
    if (found < 0)
        Py_RETURN_NONE;
    return PyBool_FromLong(found);
}

static PyMethodDef pattern_methods[] = {
    {"search", (PyCFunction)pattern_search, METH_VARARGS, "search(text: bytes) -> True, False, or None when PCRE2 gives up."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PatternType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Pattern",
    .tp_basicsize = sizeof(PatternObject),
    .tp_dealloc = (destructor)pattern_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pattern compiled by PCRE2 (UTF-8, JIT where the library has it).",
    .tp_methods = pattern_methods,
};

static PyObject *compile_pattern(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *text;
    Py_ssize_t length;
    int caseless;
    if (!PyArg_ParseTuple(args, "s#p", &text, &length, &caseless))
        return NULL;
    int error;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | PCRE2_DUPNAMES | (caseless ? PCRE2_CASELESS : 0);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)text, (PCRE2_SIZE)length, options, &error, &at, NULL);
    if (code == NULL) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        return PyErr_Format(PyExc_ValueError, "PCRE2 refuses the pattern at %zu: %s", (size_t)at, (const char *)message);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* without JIT it is interpreted: the same answers */
    PatternObject *out = PyObject_New(PatternObject, &PatternType);
    if (out == NULL) {
        pcre2_code_free(code);
        return NULL;
    }
    out->code = code;
    return (PyObject *)out;
}
#endif

/* ---- the rules of scan.py, on bytes ---- */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == 0x0c; }

/* _STAMP_START: [0-9]{4}-[0-9]{2}-[0-9]{2}T */
static int stamp_at(const unsigned char *d, size_t len, size_t at) {
    static const char shape[] = "9999-99-99T";
    if (len - at < 11)
        return 0;
    for (size_t i = 0; i < 11; i++) {
        unsigned char c = d[at + i];
        if (shape[i] == '9' ? !is_digit(c) : c != (unsigned char)shape[i])
            return 0;
    }
    return 1;
}

/* _may_have_prefix */
static int may_have_prefix(const unsigned char *d, size_t len, size_t at) {
    if (at >= len)
        return 0;
    unsigned char c = d[at];
    if (c == '(' || c == '[' || c == '>')
        return 1;
    return is_digit(c) && stamp_at(d, len, at);
}

static int is_name_start(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_name_char(unsigned char c) {
    return is_name_start(c) || is_digit(c) || c == '.' || c == ':' || c == '<' || c == '>' || c == '-';
}
static int is_ip_char(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':'; }
static int is_age_char(unsigned char c) { return is_digit(c) || c == 'h' || c == 'm' || c == 's' || c == '.'; }

/* What follows the actor name in _RAY_PID_PREFIX, from `i`: its end, or 0. Each part is greedy and
 * what may follow it cannot continue it, so no backtracking is needed past the name. */
static size_t ray_tail(const unsigned char *p, size_t n, size_t i) {
    if (i < n && p[i] == ',')
        i++;
    if (i < n && p[i] == ' ')
        i++;
    if (n - i < 4 || memcmp(p + i, "pid=", 4) != 0)
        return 0;
    i += 4;
    size_t digits = i;
    while (i < n && is_digit(p[i]))
        i++;
    if (i == digits)
        return 0;
    if (n - i >= 5 && memcmp(p + i, ", ip=", 5) == 0) {
        size_t j = i + 5;
        while (j < n && is_ip_char(p[j]))
            j++;
        if (j > i + 5)
            i = j;
    }
    if (n - i >= 2 && p[i] == ' ' && p[i + 1] == '+') {
        size_t j = i + 2;
        while (j < n && is_age_char(p[j]))
            j++;
        if (j > i + 2)
            i = j;
    }
    if (i >= n || p[i] != ')')
        return 0;
    i++;
    if (i < n && is_space(p[i]))
        i++;
    return i;
}

/* _RAY_PID_PREFIX.match: the end of the match, or 0. The name is tried longest first, as the regex
 * backtracks (`(xpid=1)` is the name `x`). */
static size_t ray_prefix(const unsigned char *p, size_t n) {
    if (n == 0 || p[0] != '(')
        return 0;
    size_t longest = 0;
    if (n > 1 && is_name_start(p[1])) {
        size_t j = 2;
        while (j < n && is_name_char(p[j]))
            j++;
        longest = j - 1;
    }
    for (size_t name = longest;; name--) {
        size_t end = ray_tail(p, n, 1 + name);
        if (end)
            return end;
        if (name == 0)
            return 0;
    }
}

static int contains(const unsigned char *p, size_t n, const char *what) { return memmem(p, n, what, strlen(what)) != NULL; }

/* _is_redraw */
static int is_redraw(const unsigned char *p, size_t n) {
    return contains(p, n, "%|") && (contains(p, n, "it/s") || contains(p, n, "s/it") || contains(p, n, "?it"));
}

static int is_blank(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_space(p[i]))
            return 0;
    return 1;
}

/* ---- classify ---- */

typedef struct {
    u64vec *hits;
    const char *data;
    size_t size;
    unsigned int below; /* ids at or past this are literal markers, reported where they end */
    unsigned int keep;  /* only ids below this are kept */
} scan_context;

static int on_match(unsigned int id, unsigned long long from, unsigned long long to, unsigned int flags, void *context) {
    (void)from;
    (void)flags;
    scan_context *c = context;
    size_t end = (size_t)to;
    if (id >= c->keep)
        return 0;
    if (id >= c->below) {
        const char *newline = end < c->size ? memchr(c->data + end, '\n', c->size - end) : NULL;
        end = newline ? (size_t)(newline - c->data) : c->size;
    }
    return push(c->hits, ((uint64_t)end << ID_BITS) | id) ? 1 : 0;
}

enum { DONE, TO_PYTHON, WITH_PIECES, DEFERRED };

#define DEFER (-2) /* a verdict: the hit needs a Python call, and classify was told not to make one */

typedef struct {
    size_t start, end;
    size_t first_hit, hits; /* the line's ids: hits.v[first_hit .. first_hit + hits) */
    size_t first_piece, pieces;
    int decision;
} line_info;

typedef struct {
    size_t offset, length; /* in the pieces buffer */
} piece_info;

typedef struct {
    unsigned int id;
    const unsigned char *text;
    size_t length;
    int verdict;
} memo_entry;

#define MEMO 32

typedef struct {
    const unsigned char *flags;
    const unsigned char *roles;
    size_t ids;
    unsigned int signatures;
    uint64_t *counts;
    size_t *last;
    hs_database_t **verifiers; /* by signature id: the exact translation of a widened one, or NULL */
    PyObject **confirmers;     /* by signature id: for an inexact one no database states, its pattern's test, or NULL */
#ifdef HAVE_PCRE2
    pcre2_code **patterns; /* by signature id: the same pattern compiled by PCRE2, or NULL (then confirmers) */
    pcre2_match_data *match;
#endif
    hs_scratch_t *scratch;
    PyThreadState **released; /* the thread state classify saved when it let go of the GIL */
    int defer;                 /* no Python call: a line that needs one is handed back as deferred */
    memo_entry memo[MEMO];     /* the current line's confirmations: each pass over its hits asks again */
    size_t memos;
} rules;

static int on_verified(unsigned int id, unsigned long long from, unsigned long long to, unsigned int flags, void *context) {
    (void)id;
    (void)from;
    (void)to;
    (void)flags;
    (void)context;
    return 1; /* one match is enough */
}

/* Whether an inexact translation's hit on this text is the signature's: 1, confirmed; 0, not;
 * -1, the line goes to Python; DEFER, it needs a Python call and r->defer forbids one. As _confirm
 * decides: the exact translation of a widened one (as LineMatcher.verify), else the signature's own
 * pattern, by PCRE2 where matcher.py handed it over, else by a Python call made with the GIL taken
 * back. */
static int confirm_hit(rules *r, unsigned int id, const unsigned char *text, size_t length) {
    for (size_t m = 0; m < r->memos; m++)
        if (r->memo[m].id == id && r->memo[m].text == text && r->memo[m].length == length)
            return r->memo[m].verdict;
    int verdict = -1;
#ifdef HAVE_PCRE2
    if (r->patterns[id] != NULL) {
        verdict = pattern_found(r->patterns[id], r->match, text, length);
    } else
#endif
    if (r->verifiers[id] != NULL) {
        hs_error_t status = hs_scan(r->verifiers[id], (const char *)text, (unsigned int)length, 0, r->scratch, on_verified, NULL);
        verdict = status == HS_SUCCESS ? 0 : status == HS_SCAN_TERMINATED ? 1 : -1;
    } else if (r->confirmers[id] != NULL) {
        if (r->defer)
            return DEFER; /* not memoised: the line is settled again, whole, by a call that may */
        PyEval_RestoreThread(*r->released);
        PyObject *answer = PyObject_CallFunction(r->confirmers[id], "y#", (const char *)text, (Py_ssize_t)length);
        if (answer == NULL)
            PyErr_Clear(); /* the Python path meets the same and deals with it */
        verdict = answer == Py_True ? 1 : answer == Py_False ? 0 : -1;
        Py_XDECREF(answer);
        *r->released = PyEval_SaveThread();
    }
    if (r->memos < MEMO) {
        memo_entry *entry = &r->memo[r->memos++];
        entry->id = id;
        entry->text = text;
        entry->length = length;
        entry->verdict = verdict;
    }
    return verdict;
}

/* What becomes of one hit of a line: 1, confirmed as it stands and counted; 0, skipped (its
 * signature does not apply to this kind of file, or its pattern does not confirm it); -1, the line
 * goes to Python; DEFER, as confirm_hit. */
static int settle_hit(rules *r, unsigned int id, const unsigned char *text, size_t length) {
    unsigned char f = r->flags[id];
    if (((f & F_ANCHORED) || !(f & F_EXACT)) && may_have_prefix(text, length, 0))
        return -1; /* _confirm checks it with the signature's pattern */
    if (!(f & F_EXACT)) {
        int confirmed = confirm_hit(r, id, text, length);
        if (confirmed <= 0)
            return confirmed; /* not confirmed: the hit is dropped */
    }
    if ((f & F_SIMPLE) && (f & F_SATURATED))
        return 1;
    if (f & F_KINDSKIP)
        return 0;
    return -1; /* gated, distinct, or its tally still wants records */
}

static void count_hit(rules *r, unsigned int id, size_t end) {
    r->counts[id] += 1;
    if (end > r->last[id]) /* lines with pieces are counted after the others */
        r->last[id] = end;
}

typedef struct {
    size_t start, length;
} span;

/* _kept_redraws: the pieces of a line with carriage returns that normalize.segments keeps. */
static size_t kept_redraws(const unsigned char *raw, size_t length, span *out, size_t room, int *overflow) {
    size_t parts = 0, from = 0;
    *overflow = 0;
    for (size_t i = 0; i <= length; i++) {
        if (i == length || raw[i] == '\r') {
            if (!is_blank(raw + from, i - from)) {
                if (parts == room) {
                    *overflow = 1;
                    return 0;
                }
                out[parts].start = from;
                out[parts].length = i - from;
                parts++;
            }
            from = i + 1;
        }
    }
    if (parts > 4) {
        size_t kept = 1;
        for (size_t i = 1; i + 2 < parts; i++)
            if (!is_redraw(raw + out[i].start, out[i].length))
                out[kept++] = out[i];
        out[kept++] = out[parts - 2];
        out[kept++] = out[parts - 1];
        parts = kept;
    }
    return parts;
}

#define MAX_PARTS 4096

static PyObject *classify(PyObject *Py_UNUSED(module), PyObject *args) {
    DatabaseObject *database;
    ScratchObject *scratch;
    Py_buffer chunk, flag_buffer, role_buffer;
    unsigned int signatures, literal_markers;
    int config_full, defer = 0;
    PyObject *verifier_list;
    if (!PyArg_ParseTuple(args, "O!O!y*y*y*IIpO|p", &DatabaseType, &database, &ScratchType, &scratch, &chunk, &flag_buffer, &role_buffer, &signatures,
                          &literal_markers, &config_full, &verifier_list, &defer))
        return NULL;
    PyObject *result = NULL;
    const unsigned char *data = chunk.buf;
    size_t size = (size_t)chunk.len;
    size_t ids = (size_t)flag_buffer.len;
    u64vec hits = {0}, piece_hits = {0};
    line_info *lines = NULL;
    piece_info *pieces = NULL;
    unsigned char *buffer = NULL;
    span *parts = NULL;
    rules r = {.flags = flag_buffer.buf, .roles = role_buffer.buf, .ids = ids, .signatures = signatures, .scratch = scratch->scratch, .defer = defer};
    size_t n_lines = 0, n_pieces = 0, buffer_length = 0, buffer_room = 0, pieces_room = 0;
    int failed = 0; /* 1: out of memory; 2: the scan failed */

    if ((size_t)role_buffer.len != ids || signatures > ids || ids > ID_MASK + 1 || literal_markers > ids) {
        PyErr_SetString(PyExc_ValueError, "flags and roles must name every id of the database");
        goto release;
    }
    r.counts = calloc(signatures ? signatures : 1, sizeof *r.counts);
    r.last = calloc(signatures ? signatures : 1, sizeof *r.last);
    parts = malloc(sizeof *parts * MAX_PARTS);
    r.verifiers = calloc(signatures ? signatures : 1, sizeof *r.verifiers);
    r.confirmers = calloc(signatures ? signatures : 1, sizeof *r.confirmers);
#ifdef HAVE_PCRE2
    r.patterns = calloc(signatures ? signatures : 1, sizeof *r.patterns);
    r.match = pcre2_match_data_create(1, NULL);
    if (r.patterns == NULL || r.match == NULL) {
        PyErr_NoMemory();
        goto release;
    }
#endif
    if (r.counts == NULL || r.last == NULL || parts == NULL || r.verifiers == NULL || r.confirmers == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    if (verifier_list != Py_None) {
        if (!PyList_Check(verifier_list) || PyList_GET_SIZE(verifier_list) > (Py_ssize_t)signatures) {
            PyErr_SetString(PyExc_TypeError, "verifiers must be a list of Database, Pattern, callable or None, by signature id");
            goto release;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(verifier_list); i++) {
            PyObject *item = PyList_GET_ITEM(verifier_list, i);
            if (item == Py_None)
                continue;
#ifdef HAVE_PCRE2
            if (PyObject_TypeCheck(item, &PatternType)) {
                r.patterns[i] = ((PatternObject *)item)->code; /* the list holds it for the call */
                continue;
            }
#endif
            if (!PyObject_TypeCheck(item, &DatabaseType) && PyCallable_Check(item)) {
                Py_INCREF(item); /* held while the GIL is let go */
                r.confirmers[i] = item;
                continue;
            }
            if (!PyObject_TypeCheck(item, &DatabaseType)) {
                PyErr_SetString(PyExc_TypeError, "verifiers must be a list of Database, Pattern, callable or None, by signature id");
                goto release;
            }
            r.verifiers[i] = ((DatabaseObject *)item)->db;
            /* The scratch grows to fit every database it scans with. */
            if (hs_alloc_scratch(r.verifiers[i], &scratch->scratch) != HS_SUCCESS) {
                PyErr_NoMemory();
                goto release;
            }
        }
        r.scratch = scratch->scratch;
    }

    Py_BEGIN_ALLOW_THREADS;
    r.released = &_save;
    scan_context context = {&hits, (const char *)data, size, literal_markers, (unsigned int)ids};
    hs_error_t status = hs_scan(database->db, (const char *)data, (unsigned int)size, 0, scratch->scratch, on_match, &context);
    if (status != HS_SUCCESS)
        failed = status == HS_SCAN_TERMINATED ? 1 : 2;
    if (!failed) {
        sort_u64(&hits);
        /* Group by line; settle what needs no second scan. */
        size_t lines_room = 0;
        size_t i = 0;
        while (i < hits.n && !failed) {
            size_t end = (size_t)(hits.v[i] >> ID_BITS);
            size_t j = i;
            while (j < hits.n && (size_t)(hits.v[j] >> ID_BITS) == end)
                j++;
            if (reserve((void **)&lines, &lines_room, n_lines + 1, sizeof *lines)) {
                failed = 1;
                break;
            }
            line_info *line = &lines[n_lines++];
            const unsigned char *stop = end > 0 ? memrchr(data, '\n', end) : NULL;
            line->start = stop ? (size_t)(stop - data) + 1 : 0;
            line->end = end;
            line->first_hit = i;
            line->hits = j - i;
            line->pieces = 0;
            line->decision = TO_PYTHON;
            r.memos = 0;
            int prefixed = may_have_prefix(data, size, line->start);
            int marks = 0, plain = 1, saturated = 1, found = 0;
            for (size_t k = i; k < j; k++) {
                unsigned int id = (unsigned int)(hits.v[k] & ID_MASK);
                unsigned char f = r.flags[id];
                if (id >= signatures) {
                    marks |= r.roles[id];
                    plain = 0;
                    continue;
                }
                found = 1;
                if (!((f & F_EXACT) && (f & F_SIMPLE)))
                    plain = 0;
                if (!(f & F_SATURATED))
                    saturated = 0;
            }
            i = j;
            const unsigned char *raw = data + line->start;
            size_t length = end - line->start;
            if (!prefixed && plain) {
                if (saturated) { /* the common line: counted as it stands */
                    for (size_t k = line->first_hit; k < line->first_hit + line->hits; k++)
                        count_hit(&r, (unsigned int)(hits.v[k] & ID_MASK), end);
                    line->decision = DONE;
                }
                continue;
            }
            if ((marks & R_SLOW) || ((marks & R_CONFIG) && !config_full))
                continue; /* the full path */
            size_t n_parts;
            if (marks & R_REDRAWN) {
                int overflow;
                n_parts = kept_redraws(raw, length, parts, MAX_PARTS, &overflow);
                if (overflow || n_parts == 0)
                    continue;
            } else if (prefixed && found) {
                parts[0].start = 0;
                parts[0].length = length;
                n_parts = 1;
            } else {
                /* Hits on the line as it stands (or none at all: nothing to do). */
                int settled = 1;
                for (size_t k = line->first_hit; k < line->first_hit + line->hits && settled; k++) {
                    unsigned int id = (unsigned int)(hits.v[k] & ID_MASK);
                    int verdict = id < signatures ? settle_hit(&r, id, raw, length) : 0;
                    if (verdict < 0) {
                        settled = 0;
                        if (verdict == DEFER)
                            line->decision = DEFERRED;
                    }
                }
                if (settled) {
                    for (size_t k = line->first_hit; k < line->first_hit + line->hits; k++) {
                        unsigned int id = (unsigned int)(hits.v[k] & ID_MASK);
                        if (id < signatures && settle_hit(&r, id, raw, length) == 1)
                            count_hit(&r, id, end);
                    }
                    line->decision = DONE;
                }
                continue;
            }
            /* The text after a launcher prefix (Ray's only), for each kept part: matched again below. */
            int cut_ok = 1;
            size_t first_piece = n_pieces, buffer_start = buffer_length;
            for (size_t p = 0; p < n_parts && cut_ok; p++) {
                const unsigned char *part = raw + parts[p].start;
                size_t part_length = parts[p].length;
                if (may_have_prefix(part, part_length, 0)) {
                    size_t cut = ray_prefix(part, part_length);
                    if (cut == 0 || may_have_prefix(part, part_length, cut)) {
                        cut_ok = 0; /* another prefix: strip_prefixes decides */
                        break;
                    }
                    part += cut;
                    part_length -= cut;
                }
                if (reserve((void **)&pieces, &pieces_room, n_pieces + 1, sizeof *pieces) ||
                    reserve((void **)&buffer, &buffer_room, buffer_length + part_length + 1, 1)) {
                    failed = 1;
                    break;
                }
                pieces[n_pieces].offset = buffer_length;
                pieces[n_pieces].length = part_length;
                memcpy(buffer + buffer_length, part, part_length);
                buffer_length += part_length;
                buffer[buffer_length++] = '\n';
                n_pieces++;
            }
            if (!cut_ok || failed) {
                n_pieces = first_piece; /* the line goes to Python: its pieces are taken back */
                buffer_length = buffer_start;
                continue;
            }
            line->first_piece = first_piece;
            line->pieces = n_pieces - first_piece;
            line->decision = WITH_PIECES;
        }
    }
    if (!failed && n_pieces) {
        /* The pieces of every line, in one scan (signatures only); then each line's hits, settled or not. */
        scan_context context2 = {&piece_hits, (const char *)buffer, buffer_length - 1, signatures, signatures};
        hs_error_t status2 = hs_scan(database->db, (const char *)buffer, (unsigned int)(buffer_length - 1), 0, scratch->scratch, on_match, &context2);
        if (status2 != HS_SUCCESS)
            failed = status2 == HS_SCAN_TERMINATED ? 1 : 2;
        if (!failed) {
            /* (piece << ID_BITS | id), sorted: equal entries are one signature's on one piece. */
            for (size_t k = 0; k < piece_hits.n; k++) {
                size_t end = (size_t)(piece_hits.v[k] >> ID_BITS);
                /* the first piece whose newline is at or after the end (bisect_left) */
                size_t low = 0, high = n_pieces;
                while (low < high) {
                    size_t middle = (low + high) / 2;
                    if (pieces[middle].offset + pieces[middle].length < end)
                        low = middle + 1;
                    else
                        high = middle;
                }
                piece_hits.v[k] = ((uint64_t)low << ID_BITS) | (piece_hits.v[k] & ID_MASK);
            }
            qsort(piece_hits.v, piece_hits.n, sizeof *piece_hits.v, compare_u64);
            size_t cursor = 0;
            for (size_t l = 0; l < n_lines; l++) {
                line_info *line = &lines[l];
                if (line->decision != WITH_PIECES)
                    continue;
                size_t last_piece = line->first_piece + line->pieces;
                r.memos = 0;
                while (cursor < piece_hits.n && (size_t)(piece_hits.v[cursor] >> ID_BITS) < line->first_piece)
                    cursor++;
                size_t from = cursor;
                while (cursor < piece_hits.n && (size_t)(piece_hits.v[cursor] >> ID_BITS) < last_piece)
                    cursor++;
                /* Every hit settles, or the whole line goes to Python; then the kept ones are counted. */
                int settled = 1, deferred = 0;
                for (int pass = 0; pass < 2 && settled; pass++) {
                    uint64_t previous = UINT64_MAX;
                    for (size_t k = from; k < cursor; k++) {
                        uint64_t hit = piece_hits.v[k];
                        if (hit == previous)
                            continue; /* a signature counts once per piece */
                        previous = hit;
                        const piece_info *piece = &pieces[hit >> ID_BITS];
                        int verdict = settle_hit(&r, (unsigned int)(hit & ID_MASK), buffer + piece->offset, piece->length);
                        if (verdict < 0) {
                            settled = 0;
                            deferred = verdict == DEFER;
                            break;
                        }
                        if (pass == 1 && verdict == 1)
                            count_hit(&r, (unsigned int)(hit & ID_MASK), line->end);
                    }
                }
                line->decision = settled ? DONE : deferred ? DEFERRED : TO_PYTHON;
            }
        }
    }
    Py_END_ALLOW_THREADS;

    if (failed == 1) {
        PyErr_NoMemory();
        goto release;
    }
    if (failed == 2) {
        PyErr_SetString(HyperscanError, "the scan failed");
        goto release;
    }
    {
        PyObject *handed = PyList_New(0);
        PyObject *counted = PyList_New(0);
        PyObject *deferred = PyList_New(0);
        if (handed == NULL || counted == NULL || deferred == NULL) {
            Py_XDECREF(handed);
            Py_XDECREF(counted);
            Py_XDECREF(deferred);
            goto release;
        }
        for (size_t l = 0; l < n_lines; l++) {
            line_info *line = &lines[l];
            if (line->decision == DEFERRED) {
                PyObject *end = PyLong_FromSsize_t((Py_ssize_t)line->end);
                if (end == NULL || PyList_Append(deferred, end) < 0) {
                    Py_XDECREF(end);
                    Py_DECREF(handed);
                    Py_DECREF(counted);
                    Py_DECREF(deferred);
                    goto release;
                }
                Py_DECREF(end);
                continue;
            }
            if (line->decision != TO_PYTHON)
                continue;
            PyObject *line_ids = PyList_New((Py_ssize_t)line->hits);
            PyObject *item = line_ids ? Py_BuildValue("(nN)", (Py_ssize_t)line->end, line_ids) : NULL;
            if (item == NULL || PyList_Append(handed, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(handed);
                Py_DECREF(counted);
                Py_DECREF(deferred);
                goto release;
            }
            for (size_t k = 0; k < line->hits; k++)
                PyList_SET_ITEM(line_ids, (Py_ssize_t)k, PyLong_FromUnsignedLong((unsigned long)(hits.v[line->first_hit + k] & ID_MASK)));
            Py_DECREF(item);
        }
        for (unsigned int id = 0; id < signatures; id++) {
            if (!r.counts[id])
                continue;
            PyObject *item = Py_BuildValue("(IKn)", id, (unsigned long long)r.counts[id], (Py_ssize_t)r.last[id]);
            if (item == NULL || PyList_Append(counted, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(handed);
                Py_DECREF(counted);
                Py_DECREF(deferred);
                goto release;
            }
            Py_DECREF(item);
        }
        result = Py_BuildValue("(NNN)", handed, counted, deferred);
    }
release:
    free(hits.v);
    free(piece_hits.v);
    free(lines);
    free(pieces);
    free(buffer);
    free(parts);
    free(r.counts);
    free(r.last);
    free(r.verifiers);
    if (r.confirmers != NULL)
        for (unsigned int id = 0; id < signatures; id++)
            Py_XDECREF(r.confirmers[id]);
    free(r.confirmers);
#ifdef HAVE_PCRE2
    free(r.patterns);
    pcre2_match_data_free(r.match);
#endif
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&flag_buffer);
    PyBuffer_Release(&role_buffer);
    return result;
}

static PyMethodDef module_methods[] = {
    {"compile", compile_database, METH_VARARGS, "compile(expressions, flags) -> Database: ids are the expressions' positions."},
    {"loads", load_database, METH_VARARGS, "loads(data) -> Database: a database from Database.dumps()."},
    {"version", library_version, METH_NOARGS, "The Hyperscan library's version."},
#ifdef HAVE_PCRE2
    {"pattern", compile_pattern, METH_VARARGS, "pattern(text, caseless) -> Pattern: compiled by PCRE2 (UTF-8); ValueError when PCRE2 refuses it."},
#endif
    {"classify", classify, METH_VARARGS,
     "classify(database, scratch, chunk, flags, roles, signatures, literal_markers, config_full, verifiers, defer=False)"
     " -> (lines, counted, deferred)\n\n"
     "lines: (end, ids) of the lines left to the Python path, in line order; counted: (id, hits, end of the last) for "
     "each signature whose hits were counted here; deferred: with defer, the ends of the lines a hit of which needs a "
     "Python call (no call is made then: the GIL is never taken), to be classified again without it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_linescan", "The aggregated scan's per-line work against the Hyperscan library.", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__linescan(void) {
    if (PyType_Ready(&DatabaseType) < 0 || PyType_Ready(&ScratchType) < 0)
        return NULL;
#ifdef HAVE_PCRE2
    if (PyType_Ready(&PatternType) < 0)
        return NULL;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    HyperscanError = PyErr_NewException("rltriage.pipeline._linescan.HyperscanError", PyExc_RuntimeError, NULL);
    if (HyperscanError == NULL || PyModule_AddObject(m, "HyperscanError", HyperscanError) < 0) {
        Py_XDECREF(HyperscanError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&DatabaseType);
    Py_INCREF(&ScratchType);
    PyModule_AddObject(m, "Database", (PyObject *)&DatabaseType);
    PyModule_AddObject(m, "Scratch", (PyObject *)&ScratchType);
#ifdef HAVE_PCRE2
    Py_INCREF(&PatternType);
    PyModule_AddObject(m, "Pattern", (PyObject *)&PatternType);
#endif
    return m;
}
