(** The whole-world box schedule ([Boxes.bplan], [Boxes.brounds]): for two
    layouts given as explicit boxes per rank, every target rank gets every
    index of its box that some rank holds exactly once, from a piece it
    holds itself or in one cut addressed to it; every cut lies in a piece
    sent by another rank, which lies in its sender's box; a piece's sender
    is the target itself exactly where the target holds the index, so a
    target receives exactly the indices of its box it does not hold (the
    lower bound); and the rounds keep every cut once within the budget. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Crossmesh Crossmeshproof Rounds Roundsproof Boxes Boxesproof.
Import ListNotations.

Lemma hits_lsum : forall p L, hits p L = lsum (fun B => if in_boxb p B then 1 else 0) L.
Proof. intros p L. induction L as [|B L IH]; simpl; auto. rewrite hits_cons, IH. reflexivity. Qed.

Lemma bplan_nth : forall srcs tgts j self T, nth_error tgts j = Some (self, T) ->
  nth_error (bplan srcs tgts) j = Some (map (fun q => mkpiece (fst q) [] (snd q)) (bsched_in (bindex srcs) self T)).
Proof. intros srcs tgts j self T E. unfold bplan, bplan_in. rewrite nth_error_map, E. reflexivity. Qed.

(** What rounds [rds] of the box schedule from layout [ls] to layout [lt]
    guarantee ([brounds_correct]: [brounds]' do): for every target rank, every index of its box that some
    rank holds arrives exactly once (from itself or in one cut addressed to
    it), each cut inside a piece from another rank holding it, a piece
    coming from the target itself exactly where it holds the index. *)
Definition boxes_ok (budget : nat) (ls lt : layout) (rds : list (list cut)) : Prop :=
  Permutation (concat rds) (xcuts budget (map fst lt) (bplan ls lt)) /\
  (forall rd, In rd rds -> bounded budget rd) /\
  forall j self T, nth_error lt j = Some (self, T) ->
  exists ps, nth_error (bplan ls lt) j = Some ps /\
    (forall q p, In q ps -> in_boxb p (pbox q) = true ->
       in_boxb p T = true /\ (exists S, In (psrc q, S) ls /\ in_boxb p S = true) /\
       (psrc q = self <-> exists S, In (self, S) ls /\ in_boxb p S = true)) /\
    (forall p, in_boxb p T = true ->
       lsum (fun q => if psrc q =? self then (if in_boxb p (pbox q) then 1 else 0) else 0) ps
       + lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0) (concat rds)
       = if held_by_any p ls then 1 else 0) /\
    (forall c, In c (concat rds) -> ctgt c = j ->
       cdst c = self /\ exists q, In q ps /\ psrc q <> self /\ csrc c = psrc q /\
         forall p, in_boxb p (cbox c) = true -> in_boxb p (pbox q) = true).

Theorem brounds_correct : forall (srcs tgts : layout) budget,
  (forall t, In t tgts -> src_dims (length (snd t)) srcs) ->
  boxes_ok budget srcs tgts (brounds budget srcs tgts).
Proof.
  intros srcs tgts budget Hdims. unfold boxes_ok.
  set (pss := bplan srcs tgts). set (tr := map fst tgts).
  pose proof (pack_perm budget (xcuts budget tr pss)) as Hp.
  split; [exact Hp|]. split; [apply pack_bounded|].
  intros j self T E.
  assert (E' : @nth_error (nat * box) tgts j = Some (self, T)) by exact E.
  set (ps := map (fun q => mkpiece (fst q) [] (snd q)) (bsched_in (bindex srcs) self T)).
  exists ps. split; [apply bplan_nth; exact E|].
  assert (Hs : src_dims (length T) srcs) by exact (Hdims (self, T) (nth_error_In _ _ E)).
  destruct (bsched_in_correct srcs self T Hs) as [Hin Hcov].
  assert (Hj : j < length pss).
  { unfold pss, bplan, bplan_in. rewrite map_length. apply nth_error_Some. intro H. rewrite H in E'. discriminate. }
  assert (Hself : nth j tr 0 = self).
  { unfold tr. apply nth_error_nth. rewrite nth_error_map, E. reflexivity. }
  assert (Hps : nth j pss [] = ps) by (apply nth_error_nth; apply bplan_nth; exact E).
  split; [|split].
  - intros q p Hq Hpq. apply in_map_iff in Hq as ([r B] & <- & Hq). simpl in *. exact (Hin r B p Hq Hpq).
  - intros p HpT. rewrite <- (Hcov p HpT), hits_lsum.
    enough (E2 : lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
                      (concat (brounds budget srcs tgts))
                 = lsum (fun q => if psrc q =? self then 0 else if in_boxb p (pbox q) then 1 else 0) ps).
    { rewrite E2, <- (lsum_split _ (fun q => if in_boxb p (pbox q) then 1 else 0) (fun q => psrc q =? self)).
      unfold ps. rewrite !lsum_map. reflexivity. }
    unfold brounds, xrounds. fold tr pss. rewrite (lsum_perm _ _ _ _ Hp).
    rewrite (xcuts_tgt budget tr pss j (fun c => if in_boxb p (cbox c) then 1 else 0) Hj).
    rewrite Hself, Hps. apply tcuts_count.
  - intros c Hc Ht. unfold brounds, xrounds in Hc. fold tr pss in Hc.
    apply (Permutation_in _ Hp) in Hc. apply xcuts_in in Hc. destruct Hc as [_ Hc].
    rewrite Ht, Hself, Hps in Hc. apply tcuts_in in Hc. destruct Hc as [Hd [_ [q [Hq [Hne [Hsrc Hin']]]]]].
    split; [exact Hd|]. exists q. auto.
Qed.
