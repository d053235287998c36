package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"

	"github.com/retainer-gw/retainer/sandbox/webapi"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

// aesCipher is aes(mode, op, key, iv, data, additional, tagBits) for
// crypto.subtle's AES-GCM, AES-CBC and AES-CTR encrypt and decrypt; bytes
// cross as Latin-1 strings. Errors name the DOMException the runtime
// throws ("OperationError: ...").
func aesCipher(args []webapi.Arg) (string, error) {
	mode, op := args[0].String(), args[1].String()
	key, iv, data := wirejson.Latin1Bytes(args[2].String()), wirejson.Latin1Bytes(args[3].String()), wirejson.Latin1Bytes(args[4].String())
	additional, tagBits := wirejson.Latin1Bytes(args[5].String()), int(args[6].Integer())
	out, err := aesCrypt(mode, op == "encrypt", key, iv, data, additional, tagBits)
	if err != nil {
		return "", err
	}
	return wirejson.Latin1(out), nil
}

func aesCrypt(mode string, encrypt bool, key, iv, data, additional []byte, tagBits int) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("DataError: the AES key must be 128, 192 or 256 bits")
	}
	switch mode {
	case "AES-GCM":
		var aead cipher.AEAD
		switch {
		case len(iv) == 12:
			aead, err = cipher.NewGCMWithTagSize(block, tagBits/8)
		case tagBits == 128 && len(iv) > 0:
			aead, err = cipher.NewGCMWithNonceSize(block, len(iv))
		default:
			return nil, fmt.Errorf("NotSupportedError: AES-GCM here takes a 96-bit iv, or any iv with a 128-bit tag")
		}
		if err != nil {
			return nil, fmt.Errorf("OperationError: %v", err)
		}
		if encrypt {
			return aead.Seal(nil, iv, data, additional), nil
		}
		out, err := aead.Open(nil, iv, data, additional)
		if err != nil {
			return nil, fmt.Errorf("OperationError: the data could not be decrypted (wrong key, iv, tag or additional data)")
		}
		return out, nil
	case "AES-CBC":
		if len(iv) != aes.BlockSize {
			return nil, fmt.Errorf("OperationError: AES-CBC needs a 16-byte iv")
		}
		if encrypt {
			pad := aes.BlockSize - len(data)%aes.BlockSize
			buf := make([]byte, len(data)+pad)
			copy(buf, data)
			for i := len(data); i < len(buf); i++ {
				buf[i] = byte(pad)
			}
			cipher.NewCBCEncrypter(block, iv).CryptBlocks(buf, buf)
			return buf, nil
		}
		if len(data) == 0 || len(data)%aes.BlockSize != 0 {
			return nil, fmt.Errorf("OperationError: the data is not a whole number of AES blocks")
		}
		buf := make([]byte, len(data))
		cipher.NewCBCDecrypter(block, iv).CryptBlocks(buf, data)
		pad := int(buf[len(buf)-1])
		if pad == 0 || pad > aes.BlockSize {
			return nil, fmt.Errorf("OperationError: bad padding")
		}
		for _, b := range buf[len(buf)-pad:] {
			if int(b) != pad {
				return nil, fmt.Errorf("OperationError: bad padding")
			}
		}
		return buf[:len(buf)-pad], nil
	case "AES-CTR":
		if len(iv) != aes.BlockSize {
			return nil, fmt.Errorf("OperationError: AES-CTR needs a 16-byte counter")
		}
		out := make([]byte, len(data))
		cipher.NewCTR(block, iv).XORKeyStream(out, data)
		return out, nil
	}
	return nil, fmt.Errorf("NotSupportedError: unsupported algorithm %s", mode)
}
