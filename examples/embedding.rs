//! Indexing by tensors: a bag-of-words classifier whose words are rows of an embedding table
//! (`take`), trained with targets given as class numbers (`one_hot`). The gradient of the
//! lookup is a `scatter_add` into the table's shape, built by `kiln::grad`.
//!
//! Run with `cargo run --release --example embedding`.

use kiln::{function, Graph, TensorRef};
use ndarray::{ArrayD, IxDyn};

const VOCAB: usize = 60;
const DIM: usize = 16;
const CLASSES: usize = 4;
const BATCH: usize = 128;
const WORDS: usize = 8;

/// A small deterministic generator for the made-up sentences.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Sentences of a class use its own quarter of the vocabulary three times in four, any word
/// otherwise; the label is the class.
fn batch(rng: &mut Lcg) -> (ArrayD<i64>, ArrayD<i64>) {
    let per = VOCAB / CLASSES;
    let labels: Vec<i64> = (0..BATCH).map(|_| rng.below(CLASSES) as i64).collect();
    let ids = ArrayD::from_shape_fn(IxDyn(&[BATCH, WORDS]), |i| {
        let c = labels[i[0]] as usize;
        match rng.below(4) {
            0 => rng.below(VOCAB) as i64,
            _ => (c * per + rng.below(per)) as i64,
        }
    });
    (
        ids,
        ArrayD::from_shape_vec(IxDyn(&[BATCH]), labels).expect("one label per row"),
    )
}

fn main() -> Result<(), kiln::Error> {
    let g = Graph::new();
    let ids = g.input("ids", kiln::i64, [None, Some(WORDS as i64)]);
    let labels = g.input("labels", kiln::i64, [None]);
    let table = g.shared(
        "table",
        ArrayD::from_shape_fn(IxDyn(&[VOCAB, DIM]), |i| {
            0.1 * kiln::random::normal_f64(7, (i[0] * DIM + i[1]) as u64) as f32
        }),
    );
    let w = g.shared("w", ArrayD::<f32>::zeros(IxDyn(&[DIM, CLASSES])));
    let b = g.shared("b", ArrayD::<f32>::zeros(IxDyn(&[CLASSES])));

    // [batch, words, dim] rows of the table, averaged over the words.
    let words = table.take(&ids, 0);
    let sentence = words.mean(Some(&[1]), false);
    let logits = sentence.matmul(&w) + &b;
    let shifted = &logits - logits.max(Some(&[1]), true);
    let log_p = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    let target = labels.one_hot(CLASSES as i64, kiln::f32);
    let loss = -(&target * &log_p).sum(Some(&[1]), false).mean(None, false);
    let right = log_p
        .argmax(Some(1), false)
        .eq(&labels)
        .cast(kiln::f32)
        .mean(None, false);

    let grads = kiln::grad(&loss, &[&table, &w, &b])?;
    let lr = 2.0;
    let train = function(&[&ids, &labels], &[&loss, &right])
        .update(&table, &table - &grads[0] * lr)
        .update(&w, &w - &grads[1] * lr)
        .update(&b, &b - &grads[2] * lr)
        .compile()?;

    let mut rng = Lcg(1);
    let (mut first, mut last) = (f64::NAN, (f64::NAN, f64::NAN));
    for step in 0..300 {
        let (x, y) = batch(&mut rng);
        let out = train.call(&[x.view().into(), y.view().into()] as &[TensorRef])?;
        let (l, acc) = (out[0].to_f64_vec()[0], out[1].to_f64_vec()[0]);
        if step == 0 {
            first = l;
        }
        if step % 50 == 0 || step == 299 {
            println!("step {step:>3}  loss {l:.4}  accuracy {:.1}%", 100.0 * acc);
        }
        last = (l, acc);
    }
    // A fresh model guesses: ln(4) = 1.386. The words say the class three times in four.
    println!("loss {first:.4} -> {:.4}", last.0);
    if !(last.0 < 0.5 * first && last.1 > 0.9) {
        return Err(kiln::Error::Runtime(format!(
            "the classifier did not learn: loss {first} -> {}, accuracy {}",
            last.0, last.1
        )));
    }
    Ok(())
}
