/*
 * Stand-in for miniaudio.h, used only to compile llama.cpp's mtmd-helper.cpp.
 *
 * The ollama module zip ships llama.cpp without its vendor/ folder. mtmd-helper
 * decodes audio for multimodal models through miniaudio; embed-stack never feeds
 * audio, so this header declares the handful of types and functions that file
 * uses and makes every decode fail cleanly (MA_ERROR), as a build without audio
 * support would. It is passed with CGO_CPPFLAGS by the Makefile.
 */
#ifndef EMBED_STACK_MINIAUDIO_STANDIN_H
#define EMBED_STACK_MINIAUDIO_STANDIN_H

#include <stddef.h>
#include <stdint.h>

#ifndef MA_API
#define MA_API static
#endif

typedef uint32_t ma_uint32;
typedef uint64_t ma_uint64;

typedef enum { MA_SUCCESS = 0, MA_ERROR = -1 } ma_result;
typedef enum { ma_format_unknown = 0, ma_format_f32 = 5 } ma_format;
typedef enum { ma_encoding_format_unknown = 0, ma_encoding_format_wav = 1 } ma_encoding_format;

typedef struct {
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_decoder_config;

typedef struct {
    int unused;
} ma_decoder;

typedef struct {
    ma_encoding_format encodingFormat;
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_encoder_config;

typedef struct {
    int unused;
} ma_encoder;

#if defined(__GNUC__)
#define MA_STANDIN_UNUSED __attribute__((unused))
#else
#define MA_STANDIN_UNUSED
#endif

MA_API MA_STANDIN_UNUSED ma_decoder_config ma_decoder_config_init(ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_decoder_config c;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

MA_API MA_STANDIN_UNUSED ma_result ma_decoder_init_memory(const void *data, size_t size, const ma_decoder_config *config, ma_decoder *decoder) {
    (void)data; (void)size; (void)config; (void)decoder;
    return MA_ERROR; /* audio decoding is not built in */
}

MA_API MA_STANDIN_UNUSED ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *decoder, ma_uint64 *length) {
    (void)decoder;
    if (length) *length = 0;
    return MA_ERROR;
}

MA_API MA_STANDIN_UNUSED ma_result ma_decoder_read_pcm_frames(ma_decoder *decoder, void *frames, ma_uint64 count, ma_uint64 *read) {
    (void)decoder; (void)frames; (void)count;
    if (read) *read = 0;
    return MA_ERROR;
}

MA_API MA_STANDIN_UNUSED ma_result ma_decoder_uninit(ma_decoder *decoder) {
    (void)decoder;
    return MA_SUCCESS;
}

MA_API MA_STANDIN_UNUSED ma_encoder_config ma_encoder_config_init(ma_encoding_format encodingFormat, ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_encoder_config c;
    c.encodingFormat = encodingFormat;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

#endif
