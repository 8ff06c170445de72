// The built-in calibration text of --calculate-kv-scales, written for octet (no source text is
// copied): varied registers so that K/V amax on it resembles what a chat model sees.
#include "models/kv_scales.h"

namespace octet {

const char* kv_calibration_text() {
  return R"TEXT(The ferry left the harbor at a quarter past seven, a little late as always. Mara stood at the rail with a paper cup of coffee that had gone cold before she reached the upper deck. Gulls followed the wake, hoping for crusts, and the island grew from a grey smudge into cliffs, pines and a white lighthouse. She had not been back in eleven years.

"Are you visiting family?" asked the man beside her, a retired engineer who was carrying a box of seedlings.
"Sort of. My grandmother left me her house. I have to decide whether to sell it."
"Then don't decide today," he said. "Nobody decides anything on the first day out here."

Recipe notes, Saturday: whisk 250 g of flour with 5 g of salt and 7 g of dried yeast; add 175 ml of warm water and 2 tablespoons of olive oil. Knead for 10 minutes, rest for 1 hour, then bake at 220 C for 25 to 30 minutes until the loaf sounds hollow.

Q: Why is the sky blue?
A: Sunlight contains every colour, but air molecules scatter short wavelengths far more strongly than long ones (Rayleigh scattering goes as 1/lambda^4), so blue light reaches your eyes from all directions of the sky.

```cpp
// Returns the index of the first element >= value in a sorted vector, or v.size().
size_t lower_bound_index(const std::vector<int>& v, int value) {
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < value) lo = mid + 1; else hi = mid;
  }
  return lo;
}
```

```python
def word_counts(path):
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            for word in line.lower().split():
                counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])[:10]
```

{"order_id": 48213, "items": [{"sku": "A-117", "qty": 3, "price": 4.99}, {"sku": "B-052", "qty": 1, "price": 129.00}], "shipped": false, "notes": null}

| Year | Revenue (M$) | Growth |
|------|--------------|--------|
| 2021 | 12.4         | +8.1%  |
| 2022 | 15.9         | +28.2% |
| 2023 | 14.7         | -7.5%  |

Checklist before the meeting:
1. Send the agenda to all attendees by Tuesday 09:00.
2. Book room 3B (capacity 14) and test the projector.
3. Print the budget summary: total 87,450.00 EUR, of which 31% is travel.

In 1687 Isaac Newton published the Principia, in which he showed that the same law of gravitation governs a falling apple and the orbit of the Moon. The force between two masses is F = G * m1 * m2 / r^2, with G approximately 6.674e-11 N m^2 kg^-2. Two centuries later, Einstein replaced this picture with curved spacetime, yet Newton's formula still guides spacecraft to Mars.

Dear support team, my order #A-99812 arrived with a cracked screen. I have attached three photos. Could you please send a replacement or refund the full amount of $349.99? Thank you, J. Okafor.

Translate to French: "The library opens at nine and closes at six." -> "La bibliotheque ouvre a neuf heures et ferme a dix-huit heures."

Primes below fifty: 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47. The square root of 2 is 1.41421356..., pi is 3.14159265..., and e is 2.71828182...
)TEXT";
}

}  // namespace octet
